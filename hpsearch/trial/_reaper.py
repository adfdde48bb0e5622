"""The parent of a Ray worker process: it learns how the worker ended, which Ray does not say.

Ray reports a worker that died without a word (``os._exit``, SIGKILL, a
segfault) as "exits with a connection error code 2. End of file" and a list of
possible causes. Started as the worker's ``py_executable`` (a prefix Ray puts
before the worker's command), this script runs the worker as its child, waits
for it, and writes ``<folder>/<pid>.exit``: the exit code, or minus the signal
number. It then ends as the worker did, so Ray sees the same death.

It runs as a file, not a module (``python _reaper.py FOLDER PYTHON ARGS...``),
so that it imports nothing of hpsearch: every worker start pays for it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def _die_with_parent() -> None:
    """In the child: the kernel kills it when the reaper dies (Ray SIGKILLs the reaper)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: no such call
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def main(argv: list[str]) -> int:
    folder, command = Path(argv[0]), argv[1:]
    child = subprocess.Popen(command, preexec_fn=_die_with_parent)  # noqa: PLW1509 - prctl only
    for number in _FORWARDED:
        signal.signal(number, lambda received, _frame: child.send_signal(received))
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:
            continue
    # Where the search's folder is gone, nobody asks any more.
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{child.pid}.exit").write_text(str(code), encoding="ascii")
    if code < 0:  # end by the same signal, as Ray would have seen the worker end
        if -code not in {signal.SIGKILL, signal.SIGSTOP}:  # the two that cannot be caught
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
