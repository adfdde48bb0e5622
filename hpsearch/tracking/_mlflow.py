"""MLflow records of a search: one parent run per ``hpsearch run``, one nested child run per trial.

Only the driver writes here. :class:`MlflowTracker` uses ``MlflowClient`` with
explicit run ids rather than MLflow's global "active run", so nothing depends
on which thread or callback happens to be current.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from mlflow.entities import Experiment, Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from sqlalchemy.exc import SQLAlchemyError

from hpsearch._compat import mlflow_sqlite_settings_per_connection
from hpsearch._locks import store_lock
from hpsearch._sqlite import write_ahead
from hpsearch.errors import HpsearchError
from hpsearch.storage_faults import storage_fault
from hpsearch.tracking._base import (
    FLUSH_S,
    MAX_TAG_CHARS,
    PARENT_TAG,
    STUDY_TAG,
    TRIAL_NUMBER_TAG,
    MetricRow,
    RunStatus,
    clip,
    mlflow_name,
)
from hpsearch.tracking._outage import unreachable
from hpsearch.tracking._store_template import seed_new_store
from hpsearch.tracking._uri import file_store_fix, file_store_folder, resolve_tracking_uri

_MAX_PARAM = 6000
_MAX_BATCH_METRICS = 1000  # MLflow's limit per log_batch call
_MAX_BATCH_TAGS = 100  # and its limits for tags and params
_MAX_BATCH_PARAMS = 100
_MAX_BATCH_ENTITIES = _MAX_BATCH_METRICS - _MAX_BATCH_TAGS - _MAX_BATCH_PARAMS  # 1000 in all


@dataclass
class _Pending:
    """What one run has been given and not yet written, since when (monotonic seconds)."""

    since: float
    params: dict[str, Param] = field(default_factory=dict)
    tags: dict[str, RunTag] = field(default_factory=dict)
    metrics: list[Metric] = field(default_factory=list)


def resolve_artifact_location(location: str) -> str:
    """A URI for an artifact location; a plain path becomes an absolute ``file://`` URI."""
    if urlparse(location).scheme in ("", "file") and not location.startswith("file:"):
        path = Path(location).resolve()
        path.mkdir(parents=True, exist_ok=True)
        return path.as_uri()
    return location


EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_DEVELOPMENT = "custom_model_development"


def runs_table_url(
    ui_address: str, experiment_id: str, metric: str | None = None, ascending: bool = False
) -> str:
    """The MLflow UI's page of the experiment's runs table (MLflow 3 routes).

    Args:
        metric: sort the table by this metric: the trials come first, listed flat
            rather than folded under their search's run, best first when
            ``ascending`` matches the objective's direction.
    """
    url = f"{ui_address.rstrip('/')}/#/experiments/{experiment_id}/runs"
    if metric is None:
        return url
    order = quote(f"metrics.`{mlflow_name(metric)}`", safe="")
    return f"{url}?orderByKey={order}&orderByAsc={str(ascending).lower()}"


def _fix_for(uri: str) -> str:
    """What to do about a store MLflow refused to open at ``uri``."""
    folder = file_store_folder(uri)
    if folder is not None:
        # MLflow's classic ./mlruns, a folder: MLflow 3 opens such a store only when told.
        return f"a folder is MLflow's file store: {file_store_fix(folder)}"
    return "check the URI, and that its server is running"


class MlflowTracker:
    """Writes runs of one MLflow experiment.

    A run's params, tags and metrics are written together: each call adds to the
    run's pending writes, which go out in one ``log_batch`` once the oldest has
    waited :data:`FLUSH_S`, when the run ends, or at :meth:`flush`. A short trial
    costs three calls (create, one batch, end) where it cost seven, and the driver
    is CPU-bound on MLflow's Python, not on waiting. What waits is at most a
    second of a running trial's records, lost only if the driver is killed
    (SIGKILL); a finished trial's are written before its run ends.

    Args:
        uri: tracking URI (SQLite file, or a tracking server URL).
        experiment: experiment name, created if missing (restored if deleted).
        artifact_location: where a new experiment keeps artifacts; ``None``: where the
            tracking server says.
        clock: monotonic seconds, for how long records have waited.
    """

    def __init__(
        self,
        uri: str,
        experiment: str,
        artifact_location: str | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.uri = resolve_tracking_uri(uri)
        write_ahead(self.uri)
        self._clock = clock
        self._pending: dict[str, _Pending] = {}
        try:
            with store_lock(self.uri):  # another driver may be creating the store
                seed_new_store(self.uri)
                self._client = MlflowClient(tracking_uri=self.uri)
                mlflow_sqlite_settings_per_connection(self._client)
                self._open_experiment(experiment, artifact_location)
        except (MlflowException, SQLAlchemyError) as exc:
            # A database server that refuses the connection fails in the store's lock,
            # before MLflow: both are the same one line.
            if storage_fault(exc) is not None:
                raise  # a corrupt, full or read-only store: the caller names it in one line
            # SQLAlchemy's text starts with the driver's error, its SQL and a link after.
            text = str(exc.message if isinstance(exc, MlflowException) else exc)
            first = (text.strip().splitlines() or [type(exc).__name__])[0]
            raise HpsearchError(
                f"tracking.uri: MLflow store '{uri}' cannot be used ({first}); {_fix_for(uri)}"
            ) from None
        self.experiment_name = experiment

    def _open_experiment(self, experiment: str, artifact_location: str | None) -> None:
        found = self._client.get_experiment_by_name(experiment)
        if found is None:
            found = self._create_experiment(experiment, artifact_location)
        self.experiment_id = found.experiment_id
        if found.lifecycle_stage == "deleted":
            self._client.restore_experiment(found.experiment_id)
        if EXPERIMENT_KIND_TAG not in found.tags:
            self._client.set_experiment_tag(
                found.experiment_id, EXPERIMENT_KIND_TAG, MODEL_DEVELOPMENT
            )

    def _create_experiment(self, experiment: str, artifact_location: str | None) -> Experiment:
        """Create the experiment, or take the one another driver created a moment before."""
        location = None
        if artifact_location is not None:
            # One folder per experiment under the artifact root, easy to browse.
            folder = re.sub(r"[^\w.-]+", "_", experiment)
            location = resolve_artifact_location(f"{artifact_location}/{folder}")
        try:
            self._client.create_experiment(
                experiment,
                artifact_location=location,
                # MLflow 3 opens an experiment of no declared kind on its GenAI
                # overview; a model-development one opens on its runs table.
                tags={EXPERIMENT_KIND_TAG: MODEL_DEVELOPMENT},
            )
        except MlflowException as exc:
            # Two drivers on one tracking server (no lock there): the other won.
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        found = self._client.get_experiment_by_name(experiment)
        if found is None:
            raise MlflowException(f"experiment '{experiment}' was created but cannot be read")
        return found

    @property
    def client(self) -> MlflowClient:
        """The underlying client, for reads."""
        return self._client

    def start_run(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
        parent_run_id: str | None = None,
    ) -> str:
        """Create a RUNNING run (nested under ``parent_run_id`` when given) and return its id."""
        all_tags = dict(tags or {})
        if parent_run_id:
            all_tags[PARENT_TAG] = parent_run_id
        run = self._client.create_run(self.experiment_id, run_name=name, tags=all_tags)
        run_id: str = run.info.run_id
        self.log_params(run_id, params or {})
        return run_id

    def when_created(
        self,
        run_id: str,
        then: Callable[[str], None],
        otherwise: Callable[[], None] | None = None,
    ) -> None:
        """``then(run_id)``: a run exists once :meth:`start_run` returns."""
        then(run_id)

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        """Log params (with the run's next batch)."""
        if params:
            pending = self._pending_of(run_id)
            for k, v in params.items():
                name = mlflow_name(str(k))
                pending.params[name] = Param(name, clip(str(v), _MAX_PARAM))
            self._flush_due()

    def log_metrics(
        self, run_id: str, metrics: Mapping[str, float], step: int, at_ms: int | None = None
    ) -> None:
        """Log metrics for one step (with the run's next batch), measured at ``at_ms``
        (Unix milliseconds; now where not given)."""
        if not metrics:
            return
        now = int(time.time() * 1000) if at_ms is None else at_ms
        pending = self._pending_of(run_id)
        pending.metrics.extend(
            Metric(mlflow_name(k), float(v), now, step) for k, v in metrics.items()
        )
        self._flush_due()

    def flush(self, older_than_s: float = 0.0) -> None:
        """Write every run's pending records (only those waiting ``older_than_s`` or more)."""
        now = self._clock()
        for run_id in [r for r, p in self._pending.items() if now - p.since >= older_than_s]:
            self._flush_run(run_id)

    def pending_runs(self) -> set[str]:
        """The runs with records given and not yet written."""
        return set(self._pending)

    def _pending_of(self, run_id: str) -> _Pending:
        pending = self._pending.get(run_id)
        if pending is None:
            pending = self._pending[run_id] = _Pending(self._clock())
        return pending

    def _flush_due(self) -> None:
        self.flush(FLUSH_S)

    def _flush_run(self, run_id: str) -> None:
        pending = self._pending.pop(run_id, None)
        if pending is None:
            return
        params, tags = list(pending.params.values()), list(pending.tags.values())
        metrics = pending.metrics
        while params or tags or metrics:
            try:
                self._client.log_batch(
                    run_id,
                    metrics=metrics[:_MAX_BATCH_ENTITIES],
                    params=params[:_MAX_BATCH_PARAMS],
                    tags=tags[:_MAX_BATCH_TAGS],
                )
            except Exception as exc:
                if unreachable(exc):
                    # Unwritten (a server out of reach): kept, ahead of what comes next.
                    # A refusal is not kept: it would be refused again at every flush.
                    self._keep(run_id, pending.since, params, tags, metrics)
                raise
            metrics = metrics[_MAX_BATCH_ENTITIES:]
            params, tags = params[_MAX_BATCH_PARAMS:], tags[_MAX_BATCH_TAGS:]

    def _keep(
        self,
        run_id: str,
        since: float,
        params: list[Param],
        tags: list[RunTag],
        metrics: list[Metric],
    ) -> None:
        """Put records a failed write did not write back in front of the run's pending ones."""
        later = self._pending.pop(run_id, None)
        kept = self._pending[run_id] = _Pending(since)
        kept.params.update({p.key: p for p in params})
        kept.tags.update({t.key: t for t in tags})
        kept.metrics.extend(metrics)
        if later is not None:
            kept.params.update(later.params)
            kept.tags.update(later.tags)
            kept.metrics.extend(later.metrics)

    def log_series(self, run_id: str, rows: Sequence[MetricRow]) -> None:
        """Log timestamped rows (each at its own step and time) in as few calls as MLflow allows."""
        self._flush_run(run_id)
        metrics = [
            Metric(mlflow_name(name), float(value), int(row.time * 1000), row.step)
            for row in rows
            for name, value in row.metrics.items()
        ]
        for start in range(0, len(metrics), _MAX_BATCH_METRICS):
            self._client.log_batch(run_id, metrics=metrics[start : start + _MAX_BATCH_METRICS])

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        """Set tags (values are turned into strings and clipped to MLflow's limit)."""
        if tags:
            pending = self._pending_of(run_id)
            for k, v in tags.items():
                pending.tags[k] = RunTag(k, clip(str(v), MAX_TAG_CHARS))
            self._flush_due()

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """Store ``text`` as an artifact file of the run."""
        self._client.log_text(run_id, text, artifact_file)

    def log_figure(self, run_id: str, figure: Any, artifact_file: str) -> None:
        """Store a matplotlib or plotly figure (plotly: interactive HTML) as an artifact."""
        self._client.log_figure(run_id, figure, artifact_file)

    def log_file(
        self, run_id: str, path: str | os.PathLike[str], folder: str | None = None
    ) -> None:
        """Store a local file as an artifact of the run (under ``folder``)."""
        self._client.log_artifact(run_id, os.fspath(path), folder)

    def end_run(self, run_id: str, status: RunStatus) -> None:
        """End a run with ``status``, its pending records written first."""
        self._flush_run(run_id)
        self._client.set_terminated(run_id, status=status.value)

    def running_run_ids(self) -> set[str]:
        """The experiment's runs still RUNNING (a live driver's, or a dead one's)."""
        runs = self._client.search_runs(
            [self.experiment_id], "attributes.status = 'RUNNING'", max_results=50000
        )
        return {run.info.run_id for run in runs}

    def runs_of_trial(self, study: str, number: int) -> dict[str, str]:
        """The experiment's runs of ``study``'s trial ``number`` (by their tags): their status."""
        # The study's name is matched here, not in the filter string: Optuna allows
        # any character in it, quotes included, and a name is never quoted wrong here.
        runs = self._client.search_runs(
            [self.experiment_id], f"tags.`{TRIAL_NUMBER_TAG}` = '{number}'", max_results=50000
        )
        return {
            run.info.run_id: run.info.status
            for run in runs
            if run.data.tags.get(STUDY_TAG) == study
        }

    def end_running_children(self, parent_run_id: str, status: RunStatus) -> None:
        """End every child run of ``parent_run_id`` still RUNNING (its driver is gone)."""
        runs = self._client.search_runs(
            [self.experiment_id],
            f"tags.mlflow.parentRunId = '{parent_run_id}' and attributes.status = 'RUNNING'",
            max_results=50000,
        )
        for run in runs:
            self.end_run(run.info.run_id, status)

    def end_if_running(self, run_id: str, status: RunStatus) -> str | None:
        """End a run left RUNNING by a driver that stopped; ignore runs already ended or gone.

        Returns:
            The run's parent run id, if it has one (a trial's: the search's run).
        """
        try:
            run = self._client.get_run(run_id)
        except MlflowException:
            return None
        if run.info.status == "RUNNING":
            self.end_run(run_id, status)
        parent = run.data.tags.get("mlflow.parentRunId")
        return str(parent) if parent else None
