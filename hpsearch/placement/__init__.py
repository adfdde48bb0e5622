"""Placement: how much of the cluster each trial gets, and on which GPU, decided at launch.

The tree: ``_base`` (the :class:`ResourcePolicy` interface and what it reads
and answers), ``_static`` (a fixed count per GPU, or CPU only), ``_packing``
(the pure utilisation-aware packing policy, decided per GPU with a reason) and
``_admission`` (that policy fed by the monitor and the cluster's GPUs, as a
resource policy).
"""

from hpsearch.placement._admission import (
    SERIES_INTERVAL_S,
    AdmissionRequest,
    PackingAdmission,
    PackingObserver,
)
from hpsearch.placement._base import (
    Admission,
    ClusterCapacity,
    NodeGpus,
    ResourcePolicy,
    RunningTrial,
)
from hpsearch.placement._packing import (
    GpuDecision,
    GpuKey,
    GpuView,
    OomEvent,
    PackingMode,
    PackingPolicy,
    PackingSettings,
    PackingView,
    Placement,
    TrialOnGpu,
    TrialProfile,
)
from hpsearch.placement._static import StaticPolicy

__all__ = [
    "SERIES_INTERVAL_S",
    "Admission",
    "AdmissionRequest",
    "ClusterCapacity",
    "GpuDecision",
    "GpuKey",
    "GpuView",
    "NodeGpus",
    "OomEvent",
    "PackingAdmission",
    "PackingMode",
    "PackingObserver",
    "PackingPolicy",
    "PackingSettings",
    "PackingView",
    "Placement",
    "ResourcePolicy",
    "RunningTrial",
    "StaticPolicy",
    "TrialOnGpu",
    "TrialProfile",
]
