"""When a trial has run past ``execution.trial_timeout``, and when its driver kills it.

The worker ends itself at the limit (a timer that exits its process). A worker
that cannot (stopped with SIGSTOP, or a trial holding the GIL in a C loop or a
catastrophic regex) is killed from outside by the driver once the limit and
:data:`KILL_GRACE_S` have passed. A pure policy: the caller gives the clock.
"""

from __future__ import annotations

KILL_GRACE_S = 5.0
"""How long past the limit a worker has to end itself before the driver kills it."""


def past_limit(
    started_at: float | None, limit_s: float | None, now: float, grace_s: float = 0.0
) -> bool:
    """Whether a trial started at ``started_at`` has run ``limit_s`` plus ``grace_s`` by ``now``."""
    if limit_s is None or started_at is None:
        return False
    return now - started_at >= limit_s + grace_s


def timeout_error(limit_s: float, last_step: int | None, killed: bool) -> str:
    """Why a trial that ran past the limit failed (``killed``: its driver ended it)."""
    how = "did not end, and was killed by the driver" if killed else "and was stopped"
    last = "none" if last_step is None else str(last_step)
    return (
        f"timeout: ran past execution.trial_timeout ({limit_s:g} s) {how}; "
        f"last reported step: {last}"
    )
