"""Runs kept in memory: the packing lab's record, read back by the lab itself.

The lab (``scripts/bench_packing.py``) runs hundreds of trials in simulated
time; written to MLflow, a 200-trial search spent most of its minute in
``log_batch``. The runs here hold what MLflow would, for the lab to read back
(the parent run's packing decisions, a trial's metrics), and die with the process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpsearch.tracking._base import (
    PARENT_TAG,
    STUDY_TAG,
    TRIAL_NUMBER_TAG,
    MetricRow,
    RunStatus,
)


@dataclass
class MemoryRun:
    """One run as :class:`MemoryTracker` keeps it."""

    name: str
    params: dict[str, str]
    tags: dict[str, str]
    status: str = "RUNNING"
    metrics: list[tuple[str, float, int]] = field(default_factory=list)
    """(name, value, step), in the order logged."""
    artifacts: dict[str, str] = field(default_factory=dict)
    """Artifact path to its text (figures and files: their path only, as ``""``)."""


class MemoryTracker:
    """A :class:`~hpsearch.tracking.Tracker` that keeps one experiment's runs in memory."""

    def __init__(self, experiment_id: str = "0") -> None:
        self._experiment_id = experiment_id
        self.runs: dict[str, MemoryRun] = {}

    @property
    def experiment_id(self) -> str:
        """The experiment's id (fixed: there is one)."""
        return self._experiment_id

    def start_run(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
        parent_run_id: str | None = None,
    ) -> str:
        """Create a RUNNING run and return its id."""
        run_id = f"memory-{len(self.runs)}"
        all_tags = {k: str(v) for k, v in (tags or {}).items()}
        if parent_run_id:
            all_tags[PARENT_TAG] = parent_run_id
        params = {str(k): str(v) for k, v in (params or {}).items()}
        self.runs[run_id] = MemoryRun(name, params, all_tags)
        return run_id

    def when_created(
        self,
        run_id: str,
        then: Callable[[str], None],
        otherwise: Callable[[], None] | None = None,
    ) -> None:
        """``then(run_id)``: the run exists."""
        then(run_id)

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        """Log params the run did not start with."""
        self.runs[run_id].params.update({str(k): str(v) for k, v in params.items()})

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int) -> None:
        """Log metrics for one step."""
        self.runs[run_id].metrics.extend((k, float(v), step) for k, v in metrics.items())

    def log_series(self, run_id: str, rows: Sequence[MetricRow]) -> None:
        """Log timestamped rows, each at its own step (the times are not kept)."""
        for row in rows:
            self.log_metrics(run_id, row.metrics, row.step)

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        """Set tags, as strings."""
        self.runs[run_id].tags.update({k: str(v) for k, v in tags.items()})

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """Keep ``text`` under ``artifact_file``."""
        self.runs[run_id].artifacts[artifact_file] = text

    def log_figure(self, run_id: str, figure: Any, artifact_file: str) -> None:
        """Note that the figure was drawn (it is not kept)."""
        self.runs[run_id].artifacts[artifact_file] = ""

    def log_file(
        self, run_id: str, path: str | os.PathLike[str], folder: str | None = None
    ) -> None:
        """Note the file's artifact path (its content is not kept)."""
        name = Path(path).name
        self.runs[run_id].artifacts[f"{folder}/{name}" if folder else name] = ""

    def end_run(self, run_id: str, status: RunStatus) -> None:
        """End a run with ``status``."""
        self.runs[run_id].status = status.value

    def flush(self, older_than_s: float = 0.0) -> None:
        """Nothing waits: every call is kept at once."""

    def running_run_ids(self) -> set[str]:
        """The runs still RUNNING."""
        return {run_id for run_id, run in self.runs.items() if run.status == "RUNNING"}

    def runs_of_trial(self, study: str, number: int) -> dict[str, str]:
        """The runs of ``study``'s trial ``number``: their status."""
        return {
            run_id: run.status
            for run_id, run in self.runs.items()
            if run.tags.get(TRIAL_NUMBER_TAG) == str(number) and run.tags.get(STUDY_TAG) == study
        }

    def end_running_children(self, parent_run_id: str, status: RunStatus) -> None:
        """End every RUNNING child of ``parent_run_id``."""
        for run_id in self.running_run_ids():
            if self.runs[run_id].tags.get(PARENT_TAG) == parent_run_id:
                self.end_run(run_id, status)

    def end_if_running(self, run_id: str, status: RunStatus) -> str | None:
        """End a run if it is RUNNING; its parent run id, if it has one."""
        run = self.runs.get(run_id)
        if run is None:
            return None
        if run.status == "RUNNING":
            self.end_run(run_id, status)
        return run.tags.get(PARENT_TAG)
