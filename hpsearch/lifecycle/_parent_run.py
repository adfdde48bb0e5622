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

from optuna.trial import FrozenTrial, TrialState

from hpsearch._secrets import without_passwords
from hpsearch.config import ObjectiveSpec, RunConfig
from hpsearch.lifecycle._base import TrialListener
from hpsearch.lifecycle._events import OPTUNA_STATE, TrialEnded
from hpsearch.monitoring import render_report
from hpsearch.oom import OomTally
from hpsearch.placement import FusionSizer, GpuDecision, PackingAdmission
from hpsearch.results import (
    StudyResults,
    figure_pages,
    start_figure_process,
    write_pareto_csv,
)
from hpsearch.study import StudyHandle
from hpsearch.telemetry import GpuMonitor
from hpsearch.tracking import STUDY_TAG, RunStatus, Tracker

logger = logging.getLogger(__name__)


class ParentRun(TrialListener):
    """One MLflow run per ``hpsearch run``, under which every trial's run is nested.

    Args:
        tracker: the MLflow writer.
        run_id: the parent run (see :meth:`start`).
        name: its name (also Tune's experiment folder).
        handle: the study (progress is read from it).
        objectives: the config's objectives.
        figures: whether the search's end draws the study's figures (``tracking.figures``).
    """

    def __init__(
        self,
        tracker: Tracker,
        run_id: str,
        name: str,
        handle: StudyHandle,
        objectives: Sequence[ObjectiveSpec],
        *,
        figures: bool = True,
    ) -> None:
        self.tracker = tracker
        self.run_id = run_id
        self.store_id: str | None = None
        """The run's id in the store, once it is created there (``run_id`` may stand in for
        it until then: a tracker that writes in a process of its own, or through an outage)."""
        self.name = name
        self._handle = handle
        self._objectives = list(objectives)
        self._series_steps = itertools.count()
        self._figures = figures
        # No figures, no process to draw them: as if it were loading already.
        self._figures_loading = not figures
        # The study as it was before this search's first trial: read once.
        self._progress = SearchProgress(objectives, handle.study.get_trials(deepcopy=False))

    @classmethod
    def start(cls, config: RunConfig, handle: StudyHandle, tracker: Tracker) -> ParentRun:
        """Open the parent run, with the config's values as params and its file attached."""
        name = f"{handle.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_id = tracker.start_run(
            name,
            params=_flatten(config.model_dump(mode="json")),
            tags={STUDY_TAG: handle.name, "hpsearch.config": config.source},
        )
        source = Path(config.source)
        if source.is_file():  # the run says what was searched
            written = without_passwords(source.read_text(encoding="utf-8"))
            tracker.log_text(run_id, written, f"config/{source.name}")
        parent = cls(
            tracker, run_id, name, handle, config.objective_list, figures=config.tracking.figures
        )
        tracker.when_created(run_id, parent._created)
        return parent

    def _created(self, store_id: str) -> None:
        self.store_id = store_id

    # -- while the search runs -----------------------------------------------------

    def on_ended(self, event: TrialEnded) -> None:
        """Counts and best value so far, stepped by finished trials; at the first complete
        one, the process that draws the figures starts (:func:`start_figure_process`: the
        figures are drawn of complete trials, and a search with none draws none)."""
        if not self._figures_loading and OPTUNA_STATE[event.outcome] is TrialState.COMPLETE:
            self._figures_loading = True
            start_figure_process()
        self._progress.add(event)
        self.tracker.log_metrics(self.run_id, self._progress.metrics(), self._progress.step)

    def decided(self, gpu: str, decision: GpuDecision) -> None:
        """Packing decisions reach the parent run in :meth:`record_packing`, all at once."""

    def series(self, points: dict[str, float]) -> None:
        """The packing policy's per-GPU series, as parent-run metrics."""
        self.tracker.log_metrics(self.run_id, points, next(self._series_steps))

    def set_tags(self, tags: dict[str, Any]) -> None:
        """Tags on the parent run (MPS, packing mode)."""
        self.tracker.set_tags(self.run_id, tags)

    # -- at the end ----------------------------------------------------------------

    def record_end(
        self,
        monitor: GpuMonitor | None,
        placing: PackingAdmission | None,
        fusion: FusionSizer | None,
    ) -> None:
        """What a search leaves on its parent run when it ends: the GPU monitor's report
        (``monitor``: the local one, stopped), the packing decisions and the study's figures."""
        if monitor is not None:
            self.record_gpu_report(monitor)
        self.record_packing(placing, fusion)
        self.record_analysis(StudyResults(self._handle.study))

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

    def record_packing(self, placing: PackingAdmission | None, fusion: FusionSizer | None) -> None:
        """Every packing decision of the search, with its reason, in time order, in
        ``packing_decisions.json``: how many trial processes share a GPU (``"decides":
        "processes"``) and how many members a fused group of a shape has (``"members"``).
        Nothing where the search neither packed GPUs nor fused trials."""
        if placing is None and fusion is None:
            return
        processes = placing.decisions if placing is not None else []
        members = fusion.decisions if fusion is not None else []
        decisions = [{"decides": "processes", **d} for d in processes] + [
            {"decides": "members", **d} for d in members
        ]
        decisions.sort(key=lambda d: float(d.get("time") or 0.0))  # type: ignore[arg-type]
        self.tracker.log_text(
            self.run_id, json.dumps(decisions, indent=2), "packing_decisions.json"
        )
        if placing is not None:
            mode = placing.policy.settings.mode
            self.tracker.set_tags(self.run_id, {"hpsearch.packing_mode": mode})

    def record_analysis(self, results: StudyResults) -> None:
        """Optuna's figures of the study (``analysis/``, unless ``tracking.figures`` is
        off), and with several objectives the Pareto front as CSV (``pareto/``)."""
        try:
            for artifact, html in figure_pages(results) if self._figures else ():
                self.tracker.log_text(self.run_id, html, artifact)
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
        """End the parent run, with what every run still has waiting written."""
        self.tracker.flush()
        self.tracker.end_run(self.run_id, status)


class SearchProgress:
    """The parent run's counts and best values, kept as trials end: the study is read once.

    Starts from the study's trials as the search starts, then adds this driver's
    trials as they end (another driver's show in its own run).

    Args:
        objectives: the config's objectives.
        trials: the study's trials before.
    """

    def __init__(self, objectives: Sequence[ObjectiveSpec], trials: Sequence[FrozenTrial]) -> None:
        self._signs = [1.0 if o.direction == "minimize" else -1.0 for o in objectives]
        self._metric = objectives[0].metric
        self._states = {TrialState.COMPLETE: 0, TrialState.PRUNED: 0, TrialState.FAIL: 0}
        self._oom = OomTally()
        self._best: float | None = None
        # The Pareto front's points (values, minimised) and how many trials sit on each.
        self._front: dict[tuple[float, ...], int] = {}
        for trial in trials:
            if trial.state in self._states:
                self._oom.add_stored(trial)
                self._count(trial.state, trial.values)

    @property
    def step(self) -> int:
        """Trials finished in the study: the metrics' step."""
        return sum(self._states.values())

    def add(self, event: TrialEnded) -> None:
        """A trial of this search ended."""
        self._oom.add(event.oom, event.admission.gpus, event.duration_s)
        values = list(event.values) if event.values is not None else None
        self._count(OPTUNA_STATE[event.outcome], values)

    def metrics(self) -> dict[str, float]:
        """``trials_complete``, ``trials_pruned``, ``trials_failed``, OOM figures, the best."""
        metrics = {
            "trials_complete": float(self._states[TrialState.COMPLETE]),
            "trials_pruned": float(self._states[TrialState.PRUNED]),
            "trials_failed": float(self._states[TrialState.FAIL]),
            **self._oom.summary(),
        }
        if self._best is not None and len(self._signs) == 1:
            metrics[f"best_{self._metric}"] = self._best * self._signs[0]
        elif self._front:
            metrics["pareto_front_size"] = float(sum(self._front.values()))
        return metrics

    def _count(self, state: TrialState, values: Sequence[float] | None) -> None:
        self._states[state] += 1
        if state != TrialState.COMPLETE or not values or len(values) != len(self._signs):
            return
        point = tuple(v * sign for v, sign in zip(values, self._signs, strict=True))
        if not all(math.isfinite(v) for v in point):
            return
        if len(point) == 1:
            self._best = point[0] if self._best is None else min(self._best, point[0])
        elif not any(_dominates(other, point) for other in self._front):
            self._front = {p: n for p, n in self._front.items() if not _dominates(point, p)}
            self._front[point] = self._front.get(point, 0) + 1


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    """Whether ``a`` is at least as good as ``b`` everywhere and better somewhere (minimised)."""
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"study": {"name": "x"}}`` -> ``{"study.name": "x"}``, for MLflow params."""
    flat: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{name}."))
        elif value is not None:
            flat[name] = without_passwords(str(value))  # a storage URL's password: ***
    return flat
