"""GPU series as a listener: each trial's share of the monitor's samples, into its MLflow run."""

from __future__ import annotations

import time
from collections.abc import Callable

from hpsearch import attrs
from hpsearch.lifecycle._base import TrialListener
from hpsearch.lifecycle._events import (
    Ending,
    GpuLoadDeclared,
    Measured,
    TrialEnded,
    TrialPlaced,
    TrialReported,
)
from hpsearch.lifecycle._mlflow import MlflowMirror
from hpsearch.telemetry import (
    SPEED_SHARE,
    ClusterGpuMetrics,
    is_speed,
    solo_metrics,
    solo_name,
)
from hpsearch.tracking import Tracker

GPU_FLUSH_S = 5.0
"""Seconds between writes of running trials' GPU series to MLflow (also at reports and the end)."""


class GpuSeries(TrialListener):
    """Cuts the monitor's samples per trial and writes them to the trial's MLflow run.

    Args:
        gpu: which trial ran on which monitored GPU, of which node.
        tracker: the MLflow writer.
        runs: the trials' MLflow runs (subscribed before this listener).
        clock: Unix time (the runner's; the monitor samples on the same clock).
    """

    def __init__(
        self,
        gpu: ClusterGpuMetrics,
        tracker: Tracker,
        runs: MlflowMirror,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._gpu = gpu
        self._clock = clock
        self._tracker = tracker
        self._runs = runs
        self._open: set[int] = set()
        self._last_flush = -float("inf")

    def on_placed(self, event: TrialPlaced) -> None:
        self._open.add(event.number)
        assigned = event.assigned
        note = self._gpu.placed(
            event.number,
            gpu_ids=list(assigned.gpu_ids),
            node_id=assigned.node_id,
            pid=assigned.pid,
            started_at=event.started_at,
        )
        run_id = self._runs.run_id(event.number)
        if note and run_id is not None:
            self._tracker.set_tags(run_id, {"hpsearch.gpu_telemetry": note})

    def on_gpu_load(self, event: GpuLoadDeclared) -> None:
        self._gpu.declared_load(event.number, event.load)

    def on_measured(self, event: Measured) -> None:
        """Each speed metric's solo equivalent, from how shared the GPU was while it measured."""
        speeds = [name for name in event.metrics if is_speed(name)]
        if not speeds or all(solo_name(name) in event.metrics for name in speeds):
            return  # no speed, or the trial gave every twin itself (a fused member's)
        share = self._gpu.speed_share(event.number, event.since, event.at)
        if share is None:
            return
        event.derive({SPEED_SHARE: share, **solo_metrics(event.metrics, share)})

    def on_reported(self, event: TrialReported) -> None:
        self._flush(event.number)

    def on_tick(self, now: float) -> None:
        # GPU series reach MLflow while trials run, not only at their end.
        if now - self._last_flush >= GPU_FLUSH_S:
            self._last_flush = now
            for number in list(self._open):
                self._flush(number)

    def on_ending(self, event: Ending) -> None:
        """Last points and the trial's GPU summary, into MLflow and the live Optuna trial."""
        self._open.discard(event.number)
        points, report = self._gpu.finish(event.number, self._clock())
        run_id = self._runs.run_id(event.number)
        if report is None or run_id is None:
            return
        self._tracker.log_series(run_id, points)
        self._tracker.log_metrics(run_id, report.metrics, 0)
        self._tracker.set_tags(run_id, report.tags)
        event.trial.set_user_attr(attrs.GPU, report.attrs)
        peaks = [v for k, v in report.metrics.items() if k.endswith("process_memory_peak_mb")]
        if peaks:
            event.peak_memory_mb = max(peaks)

    def on_ended(self, event: TrialEnded) -> None:
        self._open.discard(event.number)

    def _flush(self, number: int) -> None:
        run_id = self._runs.run_id(number)
        points = self._gpu.new_points(number)
        if points and run_id is not None:
            self._tracker.log_series(run_id, points)
