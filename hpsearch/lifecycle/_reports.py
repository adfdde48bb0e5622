"""A trial's reports as the ledger takes them: what listeners derive from the metrics (a
speed's solo equivalent), the objectives' targets noted, each step judged for pruning, and
the listeners told."""

from __future__ import annotations

from collections.abc import Callable

from hpsearch.lifecycle._base import TrialListener
from hpsearch.lifecycle._events import Measured, TrialPruned, TrialReported
from hpsearch.lifecycle._objectives import ObjectiveValues
from hpsearch.lifecycle._records import OpenTrial
from hpsearch.pruning import KEEP, PruneJudge

Tell = Callable[[Callable[[TrialListener], None]], None]
"""Tells every listener, in order (the ledger's)."""


class Reports:
    """Takes each report of an open trial.

    Args:
        objectives: notes when a metric reaches an objective's ``until`` level.
        judge: judges each step for pruning (``None``: no pruner).
        tell: tells the listeners.
        clock: the runner's clock.
    """

    def __init__(
        self,
        objectives: ObjectiveValues,
        judge: PruneJudge | None,
        tell: Tell,
        clock: Callable[[], float],
    ) -> None:
        self._objectives = objectives
        self._judge = judge
        self._tell = tell
        self._clock = clock

    def measured(
        self, record: OpenTrial, metrics: dict[str, float], since: float | None = None
    ) -> dict[str, float]:
        """``metrics`` with what listeners derive from them (a speed's solo equivalent), over
        the interval from ``since`` (default: the previous report, or the trial's start)."""
        if not metrics:
            return metrics
        now = self._clock()
        if since is None:
            since = record.measured_at if record.measured_at is not None else record.started_at
        record.measured_at = now
        measured = Measured(record.number, dict(metrics), now if since is None else since, now)
        self._tell(lambda listener: listener.on_measured(measured))
        return {**metrics, **measured.derived}

    def reported(self, record: OpenTrial, step: int, raw: dict[str, float], sharing: int) -> None:
        """Step ``step``'s metrics: recorded, judged, told (``sharing``: the trials on its GPU)."""
        first = record.last_step is None
        metrics = self.measured(record, raw)
        record.metrics.update(metrics)
        record.last_step = step
        self._objectives.note_targets(record.metrics, record.reached)
        verdict = KEEP if self._judge is None else self._judge.judge(record.trial, step, metrics)
        # The first verdict to prune is kept, with its reason, for the trial's end.
        newly_pruned = verdict.prune and record.pruned_at is None
        if newly_pruned:
            record.pruned_at, record.prune_reason = step, verdict.reason
        reported = TrialReported(record.number, step, dict(metrics), first, verdict, sharing)
        self._tell(lambda listener: listener.on_reported(reported))
        if newly_pruned:
            pruned = TrialPruned(record.number, step, verdict.reason)
            self._tell(lambda listener: listener.on_pruned(pruned))
