"""Out-of-memory: recognising it, predicting it, and the driver's book of verdicts.

The tree: ``settings`` (the ``oom`` section, pure data), ``_base`` (what a worker reports,
a known case, the stored record, a verdict), ``_detect`` (predicates over
exceptions and crash texts), ``_retry`` (the next, smaller-batch attempt: the
worker's and the simulated runner's one rule), ``_predict`` (the predictor and
the new-kind test for packing), ``_book`` (judging an OOM and keeping it on the
Optuna trial).
"""

from typing import TYPE_CHECKING

from hpsearch._lazy import lazy_exports

# Imported on first use (hpsearch._lazy): the config reads this package's settings
# without paying for what its policies import.
if TYPE_CHECKING:
    from hpsearch.oom._base import (
        PREDICTED,
        BatchRetry,
        OomCase,
        OomRecord,
        OomReport,
        OomVerdict,
    )
    from hpsearch.oom._book import (
        CONSTRAINT,
        OomBook,
        OomTally,
        is_oom,
        mark_infeasible,
        memory_cap_mb,
        oom_record,
        oom_summary,
    )
    from hpsearch.oom._detect import (
        cgroup_oom_kills,
        device_oom,
        host_oom_evidence,
        is_device_oom_message,
        is_library_alloc_failure,
        is_torch_oom,
    )
    from hpsearch.oom._predict import MeasuredConfigs, MemoryNeeds, OomPredictor, needs_at_least
    from hpsearch.oom._retry import halved, retry_smaller
    from hpsearch.oom.settings import OomAction, OomSpec

__getattr__, __dir__ = lazy_exports(__name__)

__all__ = [
    "CONSTRAINT",
    "PREDICTED",
    "BatchRetry",
    "MeasuredConfigs",
    "MemoryNeeds",
    "OomAction",
    "OomBook",
    "OomCase",
    "OomPredictor",
    "OomRecord",
    "OomReport",
    "OomSpec",
    "OomTally",
    "OomVerdict",
    "cgroup_oom_kills",
    "device_oom",
    "halved",
    "host_oom_evidence",
    "is_device_oom_message",
    "is_library_alloc_failure",
    "is_oom",
    "is_torch_oom",
    "mark_infeasible",
    "memory_cap_mb",
    "needs_at_least",
    "oom_record",
    "oom_summary",
    "retry_smaller",
]
