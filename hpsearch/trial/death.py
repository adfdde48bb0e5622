"""A worker that dies hard (``os._exit``, SIGKILL, a segfault) leaves its stderr behind.

Ray reports such a death as little more than "the actor died". While a trial
runs, its worker's stderr (file descriptor 2: Python's and any C library's
output) goes to a file the driver can read, with :mod:`faulthandler` writing
there on a fatal signal; when the worker dies without an end event the driver
puts the last lines of that file, and the signal they name, in the trial's
record.
"""

from __future__ import annotations

import faulthandler
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TAIL_LINES = 50
"""How many of a dead worker's last stderr lines its trial's record keeps."""

_FATAL = re.compile(r"Fatal Python error: (?P<what>[^\n]+)")


def stderr_file(folder: str, number: int) -> str:
    """Where trial ``number``'s stderr goes in ``folder`` (empty: no folder, nowhere)."""
    return str(Path(folder) / f"trial-{number}.stderr") if folder else ""


@contextmanager
def captured_stderr(path: str) -> Iterator[None]:
    """Within the block, file descriptor 2 writes to ``path`` (and fatal signals are dumped)."""
    if not path:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab", buffering=0) as log:
        os.dup2(log.fileno(), 2)
        faulthandler.enable(file=log, all_threads=False)
        try:
            yield
        finally:
            faulthandler.disable()
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def worker_death(crash: str, path: str) -> str:
    """The record of a worker that died without an end event: the runner's word, the
    fatal signal its stderr names, and its last lines."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines() if path else []
    except OSError:
        lines = []
    text = f"trial worker died: {crash}"
    fatal = _FATAL.search("\n".join(lines))
    if fatal is not None:
        text += f" ({fatal['what']})"
    if lines:
        tail = "\n".join(lines[-TAIL_LINES:])
        text += f"\nlast {min(len(lines), TAIL_LINES)} line(s) of its stderr:\n{tail}"
    return text
