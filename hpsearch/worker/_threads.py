"""Why a trial's code failed where it runs: in a thread of its worker, not the main one.

Ray Tune runs a function trainable in a thread of its actor, so Python refuses what
only the main thread may do: ``signal.signal`` (a library that handles SIGTERM or
SLURM's SIGUSR1 for its checkpoints) ends with "signal only works in main thread of
the main interpreter", which names neither the cause nor a way round it. The failed
trial's text says both.
"""

from __future__ import annotations

_OFF_THE_MAIN_THREAD = "signal only works in main thread"
"""Python's words for ``signal.signal`` called off the main thread."""


def with_thread_hint(error: str, exc: BaseException) -> str:
    """``error`` (a trial's traceback), with why ``exc`` happened where it did, if known."""
    if not (isinstance(exc, ValueError) and _OFF_THE_MAIN_THREAD in str(exc)):
        return error
    return (
        f"{error.rstrip()} (a trial's function runs in a thread of its worker, as under "
        "Ray Tune, where signal.signal is refused: install the handler outside the "
        "function, or run the script as it is with train: {command: ...})\n"
    )
