"""Tracking: where a search's runs are recorded.

The tree: ``_base`` (the :class:`Tracker` interface, run statuses, the tags
hpsearch sets), ``_mlflow`` (:class:`MlflowTracker`: MLflow, for every search a
user runs), ``_outage`` (:class:`OutageTracker`: a tracking server's writes kept
through an outage), ``_process`` (:class:`ProcessTracker`: the writes made by a
process of its own, ``_writer``, with ``_writer_messages`` between them) and
``_memory`` (:class:`MemoryTracker`: in memory, for the packing lab); beside them,
``_user_runs`` (:func:`trial_runs`: where the MLflow calls of a trial's own code go,
with ``_user_runs_context``, the MLflow run context provider that nests their runs,
and ``_own_metrics``, an objective those runs logged, read back) and ``_uri``
(tracking URIs made absolute, and a folder MLflow 3 would refuse refused first).
"""

from typing import TYPE_CHECKING

from hpsearch._lazy import lazy_exports

# Imported on first use (hpsearch._lazy): MLflow (most of a second to import) loads
# when a search opens its tracker, on the thread that opens its records while its
# Ray starts, not when the driver imports the parts that name a tracker.
if TYPE_CHECKING:
    from hpsearch.tracking._base import (
        FLUSH_S,
        FUSED_GROUP_TAG,
        MAX_TAG_CHARS,
        PARENT_TAG,
        RESUMES_RUN_TAG,
        STUDY_TAG,
        TRIAL_NUMBER_TAG,
        MetricRow,
        RunStatus,
        Tracker,
        mlflow_name,
    )
    from hpsearch.tracking._memory import MemoryRun, MemoryTracker
    from hpsearch.tracking._mlflow import (
        EXPERIMENT_KIND_TAG,
        MODEL_DEVELOPMENT,
        MlflowTracker,
        resolve_artifact_location,
        runs_table_url,
    )
    from hpsearch.tracking._outage import OutageTracker, use_quick_http_settings
    from hpsearch.tracking._own_metrics import logged_by_own_runs
    from hpsearch.tracking._process import ProcessTracker
    from hpsearch.tracking._uri import (
        absolute_tracking_uri,
        check_store_uri,
        resolve_tracking_uri,
    )
    from hpsearch.tracking._user_runs import TrialOf, end_open_runs, trial_runs
    from hpsearch.tracking._writer_messages import TrackingWriteError

__getattr__, __dir__ = lazy_exports(__name__)

__all__ = [
    "EXPERIMENT_KIND_TAG",
    "FLUSH_S",
    "FUSED_GROUP_TAG",
    "MAX_TAG_CHARS",
    "MODEL_DEVELOPMENT",
    "PARENT_TAG",
    "RESUMES_RUN_TAG",
    "STUDY_TAG",
    "TRIAL_NUMBER_TAG",
    "MemoryRun",
    "MemoryTracker",
    "MetricRow",
    "MlflowTracker",
    "OutageTracker",
    "ProcessTracker",
    "RunStatus",
    "Tracker",
    "TrackingWriteError",
    "TrialOf",
    "absolute_tracking_uri",
    "check_store_uri",
    "end_open_runs",
    "logged_by_own_runs",
    "mlflow_name",
    "resolve_artifact_location",
    "resolve_tracking_uri",
    "runs_table_url",
    "trial_runs",
    "use_quick_http_settings",
]
