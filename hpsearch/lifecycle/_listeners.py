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
    return [*listeners, *beside.given]
