"""The Optuna study, split as Optuna splits its own: the handle, the storage, the budget.

The tree: ``_storage`` (:func:`open_study`: storage, sampler and pruner, created
or continued), ``_handle`` (:class:`StudyHandle`: ask, the queue, the lock of a
shared study, the driver's heartbeat), ``_heartbeat`` (when a driver's trials
are lost, and their re-queueing), ``_budget`` (which trials count toward
``n_trials``, and when the search stops), ``_attrs`` (a trial's user attributes
written in one transaction), ``_proxy`` (the study served to workers over Optuna's
gRPC storage proxy).
"""

from typing import TYPE_CHECKING

from hpsearch._lazy import lazy_exports

# Imported on first use (hpsearch._lazy): reading a study's results checks its space
# (``_space_check``: Optuna's distributions only) without the storage, the proxy and
# the sampler this package also holds.
if TYPE_CHECKING:
    from hpsearch.study._attrs import set_user_attr_late, set_user_attrs
    from hpsearch.study._budget import (
        BudgetCount,
        BudgetDecision,
        BudgetTally,
        TrialBudget,
        count_budget,
        retried_numbers,
    )
    from hpsearch.study._handle import StudyHandle
    from hpsearch.study._heartbeat import (
        GRACE_PERIOD_S,
        HEARTBEAT_INTERVAL_S,
        LOST_REASON,
        MAX_LOST_RETRIES,
    )
    from hpsearch.study._proxy import serve_study
    from hpsearch.study._space_check import config_space_check
    from hpsearch.study._storage import (
        CONFIG_ATTR,
        DRIVER_SEED_STRIDE,
        DRIVERS_ATTR,
        TRAIN_ATTR,
        VERSION_ATTR,
        open_study,
        prepare_storage_url,
    )

__getattr__, __dir__ = lazy_exports(__name__)

__all__ = [
    "CONFIG_ATTR",
    "DRIVERS_ATTR",
    "DRIVER_SEED_STRIDE",
    "GRACE_PERIOD_S",
    "HEARTBEAT_INTERVAL_S",
    "LOST_REASON",
    "MAX_LOST_RETRIES",
    "TRAIN_ATTR",
    "VERSION_ATTR",
    "BudgetCount",
    "BudgetDecision",
    "BudgetTally",
    "StudyHandle",
    "TrialBudget",
    "config_space_check",
    "count_budget",
    "open_study",
    "prepare_storage_url",
    "retried_numbers",
    "serve_study",
    "set_user_attr_late",
    "set_user_attrs",
]
