"""The trial lifecycle: a ledger that owns ask and tell, and the listeners around it.

The tree: ``_events`` (what happens to a trial, as typed events), ``_base``
(the listener interface), ``_ledger`` (the open-trial table, Optuna's ask and
tell), ``_objectives`` (objective values from reports), ``_reports`` (each
report: derived, judged, told), and one module per
listener: ``_mlflow`` (the MLflow mirror), ``_oom`` (out-of-memory handling),
``_gpu`` (GPU series), ``_running`` (packing feedback: the running trials),
``_verdicts`` (pruning verdicts to workers), ``_parent_run`` (the search's
parent run), ``_checkpoints`` (checkpoint upkeep), ``_tracking`` (the tracker,
opened once the two stores agree), ``_search_records`` (the study, the tracker
and the parent run around one search), ``_listeners`` (the ledger's listeners, in
order), ``_trial_settings`` (the user's code checked
once, what every trial runs with, the launches). The progress view
(:mod:`hpsearch.progress`) is one more.
"""

from hpsearch.lifecycle._base import TrialListener
from hpsearch.lifecycle._checkpoints import CheckpointKeeper, sweep_checkpoints
from hpsearch.lifecycle._events import (
    Ending,
    GpuLoadDeclared,
    KnobsReported,
    Measured,
    Opening,
    TrialEnded,
    TrialOpened,
    TrialOutOfMemory,
    TrialPlaced,
    TrialPruned,
    TrialReported,
    TrialsReclaimed,
    TrialStarted,
)
from hpsearch.lifecycle._gpu import GPU_FLUSH_S, GpuSeries
from hpsearch.lifecycle._launches import FusionPlan, Launches
from hpsearch.lifecycle._ledger import TrialLedger
from hpsearch.lifecycle._listeners import Beside, search_listeners
from hpsearch.lifecycle._mlflow import (
    MlflowMirror,
    end_reclaimed_runs,
    reclaim_stale_trials,
    record_unwritten_runs,
)
from hpsearch.lifecycle._objectives import ObjectiveValues
from hpsearch.lifecycle._oom import OomHandling
from hpsearch.lifecycle._parent_run import ParentRun
from hpsearch.lifecycle._running import RunningTrials
from hpsearch.lifecycle._search_records import OpeningRecords, SearchEnd, SearchRecords
from hpsearch.lifecycle._store_watch import StoreWatch
from hpsearch.lifecycle._tracking import Afresh, land_tracking_writes, open_tracker
from hpsearch.lifecycle._tracking_outage import OutageLimit, outage_line
from hpsearch.lifecycle._trial_settings import (
    CheckedCode,
    WorkerSide,
    check_user_code,
    launches_for,
    study_access,
)
from hpsearch.lifecycle._verdicts import VerdictPoster

__all__ = [
    "GPU_FLUSH_S",
    "Afresh",
    "Beside",
    "CheckedCode",
    "CheckpointKeeper",
    "Ending",
    "FusionPlan",
    "GpuLoadDeclared",
    "GpuSeries",
    "KnobsReported",
    "Launches",
    "Measured",
    "MlflowMirror",
    "ObjectiveValues",
    "OomHandling",
    "Opening",
    "OpeningRecords",
    "OutageLimit",
    "ParentRun",
    "RunningTrials",
    "SearchEnd",
    "SearchRecords",
    "StoreWatch",
    "TrialEnded",
    "TrialLedger",
    "TrialListener",
    "TrialOpened",
    "TrialOutOfMemory",
    "TrialPlaced",
    "TrialPruned",
    "TrialReported",
    "TrialStarted",
    "TrialsReclaimed",
    "VerdictPoster",
    "WorkerSide",
    "check_user_code",
    "end_reclaimed_runs",
    "land_tracking_writes",
    "launches_for",
    "open_tracker",
    "outage_line",
    "reclaim_stale_trials",
    "record_unwritten_runs",
    "search_listeners",
    "study_access",
    "sweep_checkpoints",
]
