"""Simulation in one place: simulated GPUs, how trials sharing one slow, modelled trials.

For machines with no GPU (CI, a laptop) and for the packing lab, which plays
hundreds of searches in simulated time. The tree: ``_sharing`` (the sharing
model: how trials sharing a GPU, and a node's CPUs, slow each other; the packing
policy's arithmetic asks it too), ``spec`` (the simulated GPUs a config
describes, ``telemetry.simulated``: pure data), ``_backends`` (those GPUs as telemetry
backends: constant readings, a replayed trace, or a load model driven by the
running trials), ``_traces`` (the traces shipped with hpsearch), ``_pace`` (the
shared speed of trials that play in real time, in other processes), ``_plan``
(a modelled trial: its load and its reports, which the simulated-time runner
plays on a virtual clock), ``_group`` (a modelled fused group of such trials).
"""

from typing import TYPE_CHECKING

from hpsearch._lazy import lazy_exports

# Imported on first use (hpsearch._lazy): the config reads this package's spec
# without paying for what its backends import.
if TYPE_CHECKING:
    from hpsearch.simulation._backends import (
        ConstantBackend,
        LoadModelBackend,
        TraceBackend,
        simulated_backend,
    )
    from hpsearch.simulation._group import GroupPlan
    from hpsearch.simulation._pace import PacePublisher, PaceReader, SharedGpus
    from hpsearch.simulation._plan import PlannedEpoch, TrialModel, TrialPlan, tightest_limit
    from hpsearch.simulation._sharing import (
        CUDA_CONTEXT_MB,
        FusedDemand,
        SharingModel,
        cpu_rate,
        fused_memory_mb,
    )
    from hpsearch.simulation._traces import BUILTIN_TRACES, trace_path
    from hpsearch.simulation.spec import SharingSpec, SimulatedSpec, parse_simulate

__getattr__, __dir__ = lazy_exports(__name__)

__all__ = [
    "BUILTIN_TRACES",
    "CUDA_CONTEXT_MB",
    "ConstantBackend",
    "FusedDemand",
    "GroupPlan",
    "LoadModelBackend",
    "PacePublisher",
    "PaceReader",
    "PlannedEpoch",
    "SharedGpus",
    "SharingModel",
    "SharingSpec",
    "SimulatedSpec",
    "TraceBackend",
    "TrialModel",
    "TrialPlan",
    "cpu_rate",
    "fused_memory_mb",
    "parse_simulate",
    "simulated_backend",
    "tightest_limit",
    "trace_path",
]
