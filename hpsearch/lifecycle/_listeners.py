"""The listeners of a search's ledger, in the order they are told: built from the config and
the parts the root opened (the progress view is one of them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hpsearch.config import RunConfig
from hpsearch.lifecycle._base import TrialListener
from hpsearch.lifecycle._checkpoints import CheckpointKeeper
from hpsearch.lifecycle._events import TrialEnded
from hpsearch.lifecycle._gpu import GpuSeries
from hpsearch.lifecycle._mlflow import MlflowMirror
from hpsearch.lifecycle._parent_run import ParentRun
from hpsearch.lifecycle._tracking_outage import OutageLimit
from hpsearch.lifecycle._verdicts import VerdictPoster
from hpsearch.pruning import VerdictBoard
from hpsearch.telemetry import ClusterGpuMetrics
from hpsearch.tracking import OutageTracker
from hpsearch.trial.protocol import Outcome


@dataclass(frozen=True)
class Beside:
    """The listeners the root built itself, and what the others read.

    Attributes:
        oom: out-of-memory handling.
        running: the running trials, as the resource policy sees them.
        view: the progress view.
        gpu: the GPUs' metrics per trial (``None``: no GPU telemetry).
        board: where pruning verdicts go (``None``: no pruner).
        logs_dir: where workers leave each trial's output (the runs' logs).
        given: the listeners the caller of ``hpsearch.run`` gave, told after the others.
        stop: stops the search's budget when a trial asks (``ctx.stop_search``); ``None``:
            nothing to stop.
    """

    oom: TrialListener
    running: TrialListener
    view: TrialListener
    gpu: ClusterGpuMetrics | None = None
    board: VerdictBoard | None = None
    logs_dir: str = ""
    given: tuple[TrialListener, ...] = ()
    stop: Callable[[str], None] | None = None


class SearchStop(TrialListener):
    """Stops the search when a trial asks (``ctx.stop_search``, an objective's
    ``study.stop()``): no trial starts after it, those running finish."""

    def __init__(self, stop: Callable[[str], None]) -> None:
        self._stop = stop

    def on_ended(self, event: TrialEnded) -> None:
        if event.stop_search:
            self._stop(f"trial {event.number} asked it to ({event.stop_search})")


class InitialFailures(TrialListener):
    """Stops the search when the first ``limit`` trials of its run to end all failed
    (``study.max_initial_failures``): no trial starts after it, those running finish.

    W&B's agent stops so (after 5), and Optuna's ``optimize`` at a trial's first
    exception: a cause every trial shares (a metric's name, an import, a flag) would
    otherwise fail the whole budget, an hour-long trial after another. A completed or
    pruned trial ends the watch; an interrupted one counts for neither.
    """

    def __init__(self, limit: int, stop: Callable[[str], None]) -> None:
        self._limit = limit
        self._stop = stop
        self._failed = 0
        self._watching = limit > 0

    def on_ended(self, event: TrialEnded) -> None:
        if not self._watching:
            return
        if event.outcome in (Outcome.COMPLETE, Outcome.PRUNED):
            self._watching = False
        elif event.outcome is Outcome.FAIL:
            self._failed += 1
            if self._failed >= self._limit:
                self._watching = False
                self._stop(
                    f"its first {self._limit} trials failed and none completed "
                    "(study.max_initial_failures); fix what they say, or raise it"
                )


def search_listeners(
    config: RunConfig, study: str, parent: ParentRun, beside: Beside, clock: Callable[[], float]
) -> list[TrialListener]:
    """Every listener of the search on ``study``, in the order they are told of each event."""
    tracker = parent.tracker
    mirror = MlflowMirror(
        tracker, study, parent.run_id, config.objective_list, logs_dir=beside.logs_dir
    )
    # The mirror's run exists before the GPU series use it.
    listeners: list[TrialListener] = [mirror, beside.oom, beside.running]
    if beside.gpu is not None:
        listeners.append(GpuSeries(beside.gpu, tracker, mirror, clock))
    if beside.board is not None:
        listeners.append(VerdictPoster(beside.board))
    listeners += [CheckpointKeeper(), parent, beside.view]
    if isinstance(tracker, OutageTracker):
        limit = config.tracking.outage_limit
        listeners.append(OutageLimit(tracker.down_for, limit, tracker.uri, config.source))
    if beside.stop is not None:
        listeners.append(SearchStop(beside.stop))
        listeners.append(InitialFailures(config.study.max_initial_failures, beside.stop))
    return [*listeners, *beside.given]
