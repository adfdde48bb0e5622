"""A modelled trial: what it puts on its GPU and what it reports, and when.

A workload that models its own run (``hpsearch.workloads.simulated_gpu``)
writes its plan here; its ``train`` plays the plan in real time, and the
simulated-time runner plays it on a virtual clock, so both see the same trial.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from hpsearch.oom import OomReport
from hpsearch.trial.protocol import GpuLoad


@dataclass(frozen=True)
class PlannedEpoch:
    """One report: after ``seconds`` of training, these ``metrics``."""

    seconds: float
    metrics: dict[str, float]


@dataclass(frozen=True)
class TrialPlan:
    """A trial as its model predicts it.

    Attributes:
        load: the load it declares on its GPU (``None``: none).
        epochs: its reports, in order.
        oom: set when it runs out of memory before its first report.
        oom_after_s: how long it runs before it does.
    """

    load: GpuLoad | None
    epochs: tuple[PlannedEpoch, ...] = ()
    oom: OomReport | None = None
    oom_after_s: float = 0.0


class TrialModel(Protocol):
    """Predicts a trial from its parameters and the memory cap it runs under."""

    def __call__(self, params: dict[str, Any], memory_cap_mb: float | None) -> TrialPlan:
        """The plan of a trial with ``params``."""
