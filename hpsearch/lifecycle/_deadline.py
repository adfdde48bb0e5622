"""When a trial has run past ``execution.trial_timeout``, and when its driver kills it;
what a trial ended for either limit (``execution.hang_timeout`` too) failed with.

The worker ends itself at the limit (a timer that exits its process). A worker
that cannot (stopped with SIGSTOP, or a trial holding the GIL in a C loop or a
catastrophic regex) is killed from outside by the driver once the limit and
:data:`KILL_GRACE_S` have passed. A pure policy: the caller gives the clock.
"""

from __future__ import annotations

from collections.abc import Mapping

from hpsearch.trial.death import HUNG, TIMED_OUT

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
        f"{TIMED_OUT}: ran past execution.trial_timeout ({limit_s:g} s) {how}; "
        f"last reported step: {last}"
    )


def hung_error(limit_s: float, last_step: int | None) -> str:
    """Why a trial whose worker ended itself for being still (``execution.hang_timeout``)
    failed."""
    last = "none" if last_step is None else str(last_step)
    return (
        f"{HUNG}: used no CPU time and reported nothing for execution.hang_timeout "
        f"({limit_s:g} s), and its worker was ended; last reported step: {last} (a trial "
        "that waits so long on purpose needs a longer execution.hang_timeout, or null)"
    )


def to_kill(started: Mapping[str, float | None], limit_s: float | None, now: float) -> list[str]:
    """The launches (by id, each with its start) past the limit by :data:`KILL_GRACE_S`."""
    return [launch for launch, at in started.items() if past_limit(at, limit_s, now, KILL_GRACE_S)]


def stopped_late(
    started_at: float | None, last_step: int | None, limit_s: float | None, now: float
) -> str:
    """Why a trial stopped past its limit (Ctrl-C while it hung) failed; empty if it was not."""
    if limit_s is None or not past_limit(started_at, limit_s, now):
        return ""
    return timeout_error(limit_s, last_step, killed=False)
