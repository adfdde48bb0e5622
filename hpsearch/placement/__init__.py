"""Placement: how much of the cluster each trial gets, and on which GPU, decided at launch.

The tree: ``_base`` (the :class:`ResourcePolicy` interface and what it reads
and answers), ``settings`` (the ``packing`` section, pure data), ``_capacity``
(how many trials of a measured size one GPU should hold: the one arithmetic of
packing, which ``hpsearch monitor``'s advice shares), ``_static`` (a fixed count
per GPU, or CPU only), ``_views`` (what the packing policy reads and answers),
``_profiles`` (what the search's trials were measured to need), ``_evidence``
(what a GPU's samples say per trial, cut along the trials' spans), ``_ramp``
(a count doubled while each doubling pays, judged by the work done),
``_room`` (what one GPU has room for, with the arithmetic), ``_packing`` (the pure
utilisation-aware packing policy, decided per GPU with a reason), ``_place`` (which
GPU a new trial goes to), ``_fusion`` (how many members a fused group gets, from
its measured throughput), ``_admission`` (that policy fed by the monitor and the
cluster's GPUs, as a resource policy) and ``_build`` (the policy the ``packing``
section asks for).
"""

from typing import TYPE_CHECKING

from hpsearch._lazy import lazy_exports

# Imported on first use (hpsearch._lazy): the config reads this package's settings
# without paying for what its policies import.
if TYPE_CHECKING:
    from hpsearch.placement._admission import (
        SERIES_INTERVAL_S,
        AdmissionRequest,
        PackingAdmission,
        PackingFeedback,
        PackingObserver,
    )
    from hpsearch.placement._base import (
        Admission,
        ClusterCapacity,
        NodeGpus,
        ResourcePolicy,
        RunningTrial,
    )
    from hpsearch.placement._build import TrialShare, resource_policy
    from hpsearch.placement._capacity import MIN_GAIN, Fit, fit
    from hpsearch.placement._evidence import TrialSpan, device_reading, trial_profile
    from hpsearch.placement._fusion import (
        FusionChoice,
        FusionReading,
        FusionSizer,
        choose_members,
    )
    from hpsearch.placement._packing import PackingPolicy
    from hpsearch.placement._ramp import StepRates
    from hpsearch.placement._static import StaticPolicy
    from hpsearch.placement._views import (
        DeviceReading,
        GpuDecision,
        GpuKey,
        GpuView,
        Judgement,
        OomEvent,
        PackingView,
        Placement,
        TrialOnGpu,
        TrialProfile,
        Verdict,
        WorkDone,
    )
    from hpsearch.placement.settings import (
        MEMORY_HEADROOM,
        MOST_TRIALS_PER_GPU,
        SATURATION_UTIL_PCT,
        TARGET_UTIL_PCT,
        PackingMode,
        PackingSpec,
    )

__getattr__, __dir__ = lazy_exports(__name__)

__all__ = [
    "MEMORY_HEADROOM",
    "MIN_GAIN",
    "MOST_TRIALS_PER_GPU",
    "SATURATION_UTIL_PCT",
    "SERIES_INTERVAL_S",
    "TARGET_UTIL_PCT",
    "Admission",
    "AdmissionRequest",
    "ClusterCapacity",
    "DeviceReading",
    "Fit",
    "FusionChoice",
    "FusionReading",
    "FusionSizer",
    "GpuDecision",
    "GpuKey",
    "GpuView",
    "Judgement",
    "NodeGpus",
    "OomEvent",
    "PackingAdmission",
    "PackingFeedback",
    "PackingMode",
    "PackingObserver",
    "PackingPolicy",
    "PackingSpec",
    "PackingView",
    "Placement",
    "ResourcePolicy",
    "RunningTrial",
    "StaticPolicy",
    "StepRates",
    "TrialOnGpu",
    "TrialProfile",
    "TrialShare",
    "TrialSpan",
    "Verdict",
    "WorkDone",
    "choose_members",
    "device_reading",
    "fit",
    "resource_policy",
    "trial_profile",
]
