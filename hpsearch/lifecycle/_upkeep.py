"""A search's periodic upkeep: stamping its trials alive, reclaiming a dead driver's trials.

On the wall clock, whatever the runner's clock: heartbeats are judged by the
database's clock, and the listeners' ticks (GPU series flushed to MLflow) are
for people watching.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import optuna

from hpsearch.lifecycle._base import TrialListener
from hpsearch.lifecycle._events import TrialsReclaimed
from hpsearch.study import StudyHandle


class Upkeep:
    """Stamps the driver's trials alive and reclaims stale ones, each about twice per period.

    Args:
        handle: the study (its heartbeat interval and grace).
        each: tells every listener (the ledger's).
    """

    def __init__(
        self, handle: StudyHandle, each: Callable[[Callable[[TrialListener], None]], None]
    ) -> None:
        self._handle = handle
        self._each = each
        self._last_stamp = -float("inf")
        self._last_reclaim = -float("inf")

    def run(self, alive: Sequence[optuna.Trial], now: float | None = None) -> None:
        """One round: ``alive`` are the driver's trials running or waiting.

        Args:
            alive: the trials the driver holds.
            now: monotonic wall-clock seconds (default: now).
        """
        now = time.monotonic() if now is None else now
        handle = self._handle
        if now - self._last_stamp >= handle.heartbeat_interval_s / 2:
            self._last_stamp = now
            handle.stamp_alive(alive)
        if now - self._last_reclaim >= handle.grace_period_s / 2:
            self._last_reclaim = now
            reclaimed = handle.reclaim_stale()
            if reclaimed:
                gone = TrialsReclaimed(tuple(reclaimed))
                self._each(lambda listener: listener.on_reclaimed(gone))
        self._each(lambda listener: listener.on_tick(now))
