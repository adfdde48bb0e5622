"""A training function that calls ``sys.exit``: often a script's ``main()`` made a function.

``SystemExit`` is not an ``Exception``. Let through, it ended the trial's worker
process, and the trial failed with Ray's words ("Should not have reached here. The
TuneController should not have scheduled another `train` remote call", or "Worker
exits unexpectedly"); under Optuna's own ``optimize`` it ends the whole search.
hpsearch reads it as the function's end instead, as a shell reads a script's:
``sys.exit()`` or ``sys.exit(0)`` returns (the trial completes with what it
reported), any other code fails the trial with one line that says so, and the
worker goes on to its next trial.
"""

from __future__ import annotations


def exit_failure(exc: SystemExit, called: str) -> str | None:
    """Why a ``sys.exit`` from ``called`` (e.g. ``train``) fails its trial; ``None`` where it
    exited 0 (``sys.exit()``, ``sys.exit(0)``): the function's return."""
    code = exc.code
    if code is None or code == 0:
        return None
    return (
        f"{called} called sys.exit({code!r}): a non-zero exit fails the trial; a training "
        "function ends by returning (or raising), its worker goes on to the next trial"
    )
