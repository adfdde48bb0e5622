"""Runners: where trials execute, behind one interface (``_base``).

The tree: ``_base`` (:class:`TrialRunner` and its session), ``_tune`` (Ray
Tune: ``_cluster`` connects to Ray, ``_adapters`` are Tune's searcher and
callback, ``_trainable`` runs a trial in a Ray worker), ``_simulated``
(modelled trials on a virtual clock), ``_mps`` (NVIDIA MPS for a search's shared
GPUs), ``_services`` (what a search runs beside its session: the GPU monitors, MPS).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpsearch.runner._base import RunnerSession, TrialEvents, TrialRunner, TrialSource
    from hpsearch.runner._mps import MpsDaemons, MpsState, gpu_pipe, use_mps
    from hpsearch.runner._services import gpu_readings, mps_daemons, mps_starter
    from hpsearch.runner._simulated import (
        MODELLED_TRAIN,
        SIMULATED_NODE,
        SimulatedRunner,
        VirtualClock,
    )
    from hpsearch.runner._tune import RAY_RESULTS_DIR, RayTuneRunner

__all__ = [
    "MODELLED_TRAIN",
    "RAY_RESULTS_DIR",
    "SIMULATED_NODE",
    "MpsDaemons",
    "MpsState",
    "RayTuneRunner",
    "RunnerSession",
    "SimulatedRunner",
    "TrialEvents",
    "TrialRunner",
    "TrialSource",
    "VirtualClock",
    "gpu_pipe",
    "gpu_readings",
    "mps_daemons",
    "mps_starter",
    "use_mps",
]

# Each name is imported from its module when first used: a trial's Ray worker,
# which imports this package for its trainable alone, loads none of the driver's
# parts, and a simulated search never loads Ray (seconds of imports).
_LAZY = {
    "RunnerSession": "_base",
    "TrialEvents": "_base",
    "TrialRunner": "_base",
    "TrialSource": "_base",
    "MpsDaemons": "_mps",
    "MpsState": "_mps",
    "gpu_pipe": "_mps",
    "use_mps": "_mps",
    "gpu_readings": "_services",
    "mps_daemons": "_services",
    "mps_starter": "_services",
    "MODELLED_TRAIN": "_simulated",
    "SIMULATED_NODE": "_simulated",
    "SimulatedRunner": "_simulated",
    "VirtualClock": "_simulated",
    "RAY_RESULTS_DIR": "_tune",
    "RayTuneRunner": "_tune",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hpsearch.runner' has no attribute {name!r}")
    return getattr(import_module(f"hpsearch.runner.{module}"), name)
