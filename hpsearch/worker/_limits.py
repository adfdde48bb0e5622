"""The limits a trial's worker holds it to: its time (``execution.trial_timeout``), and
how a worker ends itself at one.

A hung trial (a deadlock, a stuck collective, a blocking C call) cannot be stopped
from inside Python; ending its process frees its resources, and the driver records
why from the exit code (:mod:`hpsearch.trial.protocol`) and the line on its stderr.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from hpsearch._procs import descendants
from hpsearch.trial.protocol import EXIT_TIMEOUT


def end_worker(line: str, code: int) -> NoReturn:
    """Say ``line`` on stderr, kill what this process started, and exit with ``code``."""
    sys.stderr.write(f"{line}\n")
    sys.stderr.flush()
    # What the trial started (a script and its children, DataLoader workers) ends with
    # it: an exiting process takes none of its descendants along.
    for child in descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)
    os._exit(code)


@contextmanager
def time_limit(seconds: float | None, number: int) -> Iterator[None]:
    """End this worker process (exit :data:`EXIT_TIMEOUT`) if the block runs past ``seconds``."""
    if seconds is None:
        yield
        return

    def overdue() -> None:
        end_worker(
            f"hpsearch: trial {number} ran past execution.trial_timeout ({seconds:g} s); "
            "ending its worker",
            EXIT_TIMEOUT,
        )

    timer = threading.Timer(seconds, overdue)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
