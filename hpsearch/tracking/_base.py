"""What records a search: the :class:`Tracker` interface, run statuses and the tags it reads.

A search records one parent run per ``hpsearch run`` and one child run per
trial. :class:`~hpsearch.tracking.MlflowTracker` writes them to MLflow (every
user's search); :class:`~hpsearch.tracking.MemoryTracker` keeps them in memory
(the packing lab, where a search of hundreds of trials takes seconds).
"""

from __future__ import annotations

import enum
import functools
import os
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

TRIAL_NUMBER_TAG = "optuna.trial_number"
STUDY_TAG = "optuna.study_name"
PARENT_TAG = "mlflow.parentRunId"
RESUMES_RUN_TAG = "hpsearch.resumes_run"
"""On the run of a re-run of an interrupted trial: the interrupted attempt's run id."""
FUSED_GROUP_TAG = "hpsearch.fused_group"
"""On a fused trial's run: its group, the number of the group's first trial."""


FLUSH_S = 1.0
"""How long a run's params, tags and metrics may wait to be written with its next ones."""


class RunStatus(enum.StrEnum):
    """Terminal run statuses used by hpsearch (MLflow's names)."""

    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"


class MetricRow(Protocol):
    """Metrics measured together at one time (e.g. one GPU sample), for ``log_series``."""

    @property
    def metrics(self) -> Mapping[str, float]:
        """Metric name to value."""

    @property
    def step(self) -> int:
        """The step the values are filed under."""

    @property
    def time(self) -> float:
        """Unix time of the measurement, in seconds."""


class Tracker(Protocol):
    """Where the runs of one experiment are written, by run id (only the driver writes)."""

    @property
    def experiment_id(self) -> str:
        """The experiment's id (the runs table's address names it)."""

    def start_run(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
        parent_run_id: str | None = None,
    ) -> str:
        """Create a RUNNING run (nested under ``parent_run_id`` when given) and return its id."""

    def when_created(
        self,
        run_id: str,
        then: Callable[[str], None],
        otherwise: Callable[[], None] | None = None,
    ) -> None:
        """Call ``then`` with the id the store gave ``run_id``: at once, or, for a run opened
        while a tracking server was out of reach (a stand-in id), once it is created;
        ``otherwise`` if the search ends without it having been created."""

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int) -> None:
        """Log metrics for one step."""

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        """Log params the run did not start with."""

    def log_series(self, run_id: str, rows: Sequence[MetricRow]) -> None:
        """Log timestamped rows, each at its own step and time."""

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        """Set tags (values are turned into strings)."""

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """Store ``text`` as an artifact file of the run."""

    def log_figure(self, run_id: str, figure: Any, artifact_file: str) -> None:
        """Store a matplotlib or plotly figure as an artifact."""

    def log_file(
        self, run_id: str, path: str | os.PathLike[str], folder: str | None = None
    ) -> None:
        """Store a local file as an artifact of the run (under ``folder``)."""

    def end_run(self, run_id: str, status: RunStatus) -> None:
        """End a run with ``status``."""

    def flush(self, older_than_s: float = 0.0) -> None:
        """Write what waits to be written (only what has waited ``older_than_s`` or more)."""

    def running_run_ids(self) -> set[str]:
        """The experiment's runs still RUNNING (a live driver's, or a dead one's)."""

    def runs_of_trial(self, study: str, number: int) -> dict[str, str]:
        """The experiment's runs of ``study``'s trial ``number`` (by their tags): their status.

        An experiment can hold several studies' runs (a rerun's study shares it), so
        the study's name is part of what identifies a trial's run.
        """

    def end_running_children(self, parent_run_id: str, status: RunStatus) -> None:
        """End every child run of ``parent_run_id`` still RUNNING (its driver is gone)."""

    def end_if_running(self, run_id: str, status: RunStatus) -> str | None:
        """End a run left RUNNING by a driver that stopped; ignore runs ended or gone.

        Returns:
            The run's parent run id, if it has one (a trial's: the search's run).
        """


MAX_TAG_CHARS = 5000
"""The longest tag value hpsearch writes (MLflow's own limit is higher in recent versions;
a longer value is cut)."""


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending in ``...`` where cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


_REFUSED_IN_NAMES = re.compile(r"[^\w./ :-]")
"""A character MLflow refuses in a metric's or a param's name (outside Windows)."""


@functools.lru_cache(maxsize=4096)  # each trial reports the same few names
def mlflow_name(name: str) -> str:
    """The name MLflow takes for a metric or a param named ``name``: itself where MLflow
    takes it; else each character MLflow refuses made ``_`` (``acc@1`` is ``acc_1``, as
    timm and torchvision name top-1 accuracy), and a path MLflow would normalise made one
    it need not (no leading ``/``, ``//``, ``.`` or ``..`` part). A trial reports what it
    likes, as under Ray Tune; only its MLflow record is named so."""
    taken = _REFUSED_IN_NAMES.sub("_", name)
    if posixpath.normpath(taken) == taken and taken != "." and not taken.startswith(("/", "..")):
        return taken
    parts = [part if part not in {".", ".."} else "_" for part in taken.split("/") if part]
    return "/".join(parts) or "_"
