"""SIGTERM and SIGHUP stop a search as Ctrl-C does: trials re-queued, runs ended KILLED,
exit 143 (SIGTERM) or 129 (SIGHUP).

Ray's ``ray.init`` makes SIGTERM exit the driver at once (``sys.exit``), which
skips the search's own ending and leaves trials RUNNING; a scheduler or
``timeout`` that sends SIGTERM would lose what Ctrl-C keeps. SIGHUP (a closed
terminal or SSH session) killed the driver outright, with nothing printed.
While a search runs, either is turned into the SIGINT Ctrl-C sends, and
remembered, so that the command exits with 128 + its number rather than 130.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from hpsearch._secrets import without_passwords

EXIT_TERMINATED = 128 + signal.SIGTERM
TERMINATING = (signal.SIGTERM, signal.SIGHUP)
"""The signals that stop a search as Ctrl-C does, and exit with 128 + their number."""

_terminated = threading.Event()
_interrupted = threading.Event()
_by: list[signal.Signals] = []


def interrupted() -> bool:
    """Whether Ctrl-C (or a SIGTERM, turned into one) stopped the search."""
    return _interrupted.is_set() or _terminated.is_set()


def note_interrupted() -> None:
    """Record that the search was stopped by Ctrl-C (a runner that caught it says so)."""
    _interrupted.set()


_stopped_for: list[str] = []


def stop_for(reason: str, *, signal_now: bool = True) -> None:
    """Stop the search as Ctrl-C does, for a fault it cannot go on with (a tracking server
    gone too long): trials queued again, runs ended; the command prints ``reason`` as its
    one error line and exits 2. ``signal_now``: interrupt the running search (else it has
    already ended, and only the exit is decided)."""
    if not _stopped_for:
        _stopped_for.append(without_passwords(reason))  # the error line: no URL's password
    if signal_now:
        os.kill(os.getpid(), signal.SIGINT)


def stopped_for() -> str | None:
    """Why :func:`stop_for` stopped the search, if it did."""
    return _stopped_for[0] if _stopped_for else None


def clear_stop() -> None:
    """Forget an earlier search's :func:`stop_for` (a new search starts)."""
    _stopped_for.clear()


def terminated() -> bool:
    """Whether a SIGTERM or SIGHUP stopped the search (the interruption is then its doing)."""
    return _terminated.is_set()


def terminated_by() -> str:
    """The name of the signal that stopped the search (``SIGTERM`` where none did)."""
    return (_by[0] if _by else signal.SIGTERM).name


def terminated_exit_code() -> int:
    """The exit code of a search a signal stopped: 128 + its number (143 for SIGTERM)."""
    return 128 + int(_by[0] if _by else signal.SIGTERM)


_on_sigterm: list[Callable[[], None]] = []


def _as_ctrl_c(signum: int, frame: FrameType | None) -> None:
    first = not _terminated.is_set()
    if first:
        _by.append(signal.Signals(signum))
    _terminated.set()
    if first:
        for action in list(_on_sigterm):
            threading.Thread(target=action, name="hpsearch-sigterm", daemon=True).start()
    os.kill(os.getpid(), signal.SIGINT)


@contextmanager
def on_sigterm(action: Callable[[], None]) -> Iterator[None]:
    """Within the block, a SIGTERM (or SIGHUP) also starts ``action`` in a thread of its
    own: for what the main thread cannot do while a library it waits in hangs (Ray's,
    when a signal to the whole process group stopped Ray's processes too)."""
    _on_sigterm.append(action)
    try:
        yield
    finally:
        _on_sigterm.remove(action)


@contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP interrupt as Ctrl-C does (main thread only).

    Entering it starts a search: what stopped an earlier one in this process is forgotten.
    """
    _terminated.clear()
    _interrupted.clear()
    _stopped_for.clear()
    _by.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _as_ctrl_c) for signum in TERMINATING}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
