"""The search's MLflow parent run: the config, study progress as trials end, and the close-out.

:class:`ParentRun` is a lifecycle listener (counts and the best value so far,
stepped by finished trials), a packing observer (the per-GPU series) and what
the composition root calls when the search ends (the GPU report, the packing
decisions, the Pareto front, the final status).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from optuna.trial import TrialState

from hpsearch.config import ObjectiveSpec, RunConfig
from hpsearch.lifecycle._base import TrialListener
from hpsearch.lifecycle._events import TrialEnded
from hpsearch.oom import oom_summary
from hpsearch.placement import GpuDecision
from hpsearch.results import StudyResults, analysis_figures, write_pareto_csv
from hpsearch.study import StudyHandle
from hpsearch.telemetry import GpuMonitor, render_report
from hpsearch.tracking import STUDY_TAG, MlflowTracker, RunStatus

logger = logging.getLogger(__name__)


class ParentRun(TrialListener):
    """One MLflow run per ``hpsearch run``, under which every trial's run is nested.

    Args:
        tracker: the MLflow writer.
        run_id: the parent run (see :meth:`start`).
        name: its name (also Tune's experiment folder).
        handle: the study (progress is read from it).
        objectives: the config's objectives.
    """

    def __init__(
        self,
        tracker: MlflowTracker,
        run_id: str,
        name: str,
        handle: StudyHandle,
        objectives: Sequence[ObjectiveSpec],
    ) -> None:
        self.tracker = tracker
        self.run_id = run_id
        self.name = name
        self._handle = handle
        self._objectives = list(objectives)
        self._series_steps = itertools.count()

    @classmethod
    def start(cls, config: RunConfig, handle: StudyHandle, tracker: MlflowTracker) -> ParentRun:
        """Open the parent run, with the config's values as params and its file attached."""
        name = f"{handle.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_id = tracker.start_run(
            name,
            params=_flatten(config.model_dump(mode="json")),
            tags={STUDY_TAG: handle.name, "hpsearch.config": config.source},
        )
        source = Path(config.source)
        if source.is_file():  # the run says what was searched
            tracker.log_text(run_id, source.read_text(encoding="utf-8"), f"config/{source.name}")
        return cls(tracker, run_id, name, handle, config.objective_list)

    # -- while the search runs -----------------------------------------------------

    def on_ended(self, event: TrialEnded) -> None:
        """Counts and best value so far, stepped by finished trials."""
        study = self._handle.study
        trials = study.get_trials(deepcopy=False)
        counts = {
            "trials_complete": sum(t.state == TrialState.COMPLETE for t in trials),
            "trials_pruned": sum(t.state == TrialState.PRUNED for t in trials),
            "trials_failed": sum(t.state == TrialState.FAIL for t in trials),
        }
        step = sum(counts.values())
        metrics: dict[str, float] = {k: float(v) for k, v in counts.items()}
        metrics.update(oom_summary(trials))
        if counts["trials_complete"] and len(self._objectives) == 1:
            best = float(study.best_value)
            if math.isfinite(best):
                metrics[f"best_{self._objectives[0].metric}"] = best
        elif counts["trials_complete"]:
            metrics["pareto_front_size"] = float(len(study.best_trials))
        self.tracker.log_metrics(self.run_id, metrics, step)

    def decided(self, gpu: str, decision: GpuDecision) -> None:
        """Packing decisions reach the parent run in :meth:`record_packing`, all at once."""

    def series(self, points: dict[str, float]) -> None:
        """The packing policy's per-GPU series, as parent-run metrics."""
        self.tracker.log_metrics(self.run_id, points, next(self._series_steps))

    def set_tags(self, tags: dict[str, Any]) -> None:
        """Tags on the parent run (MPS, packing mode)."""
        self.tracker.set_tags(self.run_id, tags)

    # -- at the end ----------------------------------------------------------------

    def record_gpu_report(self, monitor: GpuMonitor) -> None:
        """The monitor's report and per-GPU summaries."""
        summaries = monitor.summaries(since=0.0)
        metrics: dict[str, float] = {"gpu_monitor_cpu_share_pct": 0.0}
        if monitor.wall_s:
            metrics["gpu_monitor_cpu_share_pct"] = 100 * monitor.sampler_cpu_s / monitor.wall_s
        for summary in summaries:
            if summary.utilization is not None:
                metrics[f"gpu{summary.index}_utilization_mean_pct"] = summary.utilization.mean
            if summary.memory_used is not None:
                metrics[f"gpu{summary.index}_memory_peak_mb"] = summary.memory_used.max
        self.tracker.log_metrics(self.run_id, metrics, 0)
        report = render_report(
            summaries,
            source=monitor.backend.describe(),
            interval_s=monitor.interval_s,
            sampler_cpu_s=monitor.sampler_cpu_s,
            wall_s=monitor.wall_s,
        )
        self.tracker.log_text(self.run_id, report, "gpu_report.txt")

    def record_packing(self, decisions: list[dict[str, object]], mode: str) -> None:
        """Every packing decision of the search, with its reason."""
        self.tracker.log_text(
            self.run_id, json.dumps(decisions, indent=2), "packing_decisions.json"
        )
        self.tracker.set_tags(self.run_id, {"hpsearch.packing_mode": mode})

    def record_analysis(self, results: StudyResults) -> None:
        """Optuna's figures of the study (``analysis/``), and with several objectives the
        Pareto front as CSV (``pareto/``)."""
        try:
            for artifact, figure in analysis_figures(results).items():
                self.tracker.log_figure(self.run_id, figure, artifact)
            if results.is_multi_objective:
                with tempfile.TemporaryDirectory() as folder:
                    path = write_pareto_csv(results, Path(folder))
                    if path is not None:
                        self.tracker.log_file(self.run_id, path, "pareto")
        except Exception as exc:
            # This runs while a search ends, maybe on an error of its own: a figure that
            # cannot be drawn must not hide that error or lose the records.
            logger.warning("no analysis figures on the parent run: %s", exc)

    def end(self, status: RunStatus) -> None:
        """End the parent run."""
        self.tracker.end_run(self.run_id, status)


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"study": {"name": "x"}}`` -> ``{"study.name": "x"}``, for MLflow params."""
    flat: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{name}."))
        elif value is not None:
            flat[name] = str(value)
    return flat
