"""Runners: where trials execute, behind one interface (``_base``).

The tree: ``_base`` (:class:`TrialRunner` and its session), ``_tune`` (Ray
Tune: ``_cluster`` connects to Ray, ``_adapters`` are Tune's searcher and
callback, ``_trainable`` runs a trial in a Ray worker), ``_simulated``
(modelled trials on a virtual clock), ``_mps`` (NVIDIA MPS for a search).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hpsearch.runner._base import RunnerSession, TrialEvents, TrialRunner, TrialSource
from hpsearch.runner._mps import MPS_ENV, MpsState, mps_daemon
from hpsearch.runner._simulated import SIMULATED_NODE, SimulatedRunner, VirtualClock

if TYPE_CHECKING:
    from hpsearch.runner._tune import RAY_RESULTS_DIR, RayTuneRunner

__all__ = [
    "MPS_ENV",
    "RAY_RESULTS_DIR",
    "SIMULATED_NODE",
    "MpsState",
    "RayTuneRunner",
    "RunnerSession",
    "SimulatedRunner",
    "TrialEvents",
    "TrialRunner",
    "TrialSource",
    "VirtualClock",
    "mps_daemon",
]


def __getattr__(name: str) -> Any:
    # Ray takes seconds to import; a simulated search never needs it.
    if name in ("RayTuneRunner", "RAY_RESULTS_DIR"):
        from hpsearch.runner import _tune

        return getattr(_tune, name)
    raise AttributeError(f"module 'hpsearch.runner' has no attribute {name!r}")
