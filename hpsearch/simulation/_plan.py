"""A modelled trial: what it puts on its GPU and what it reports, and when.

A workload that models its own run (``hpsearch.workloads.simulated_gpu``)
writes its plan here; its ``train`` plays the plan in real time, and the
simulated-time runner plays it on a virtual clock, so both see the same trial.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from hpsearch.oom import OomReport
from hpsearch.telemetry import GpuLoad


@dataclass(frozen=True)
class PlannedEpoch:
    """One report: after ``seconds`` of training alone on its GPU, these ``metrics``.

    Attributes:
        seconds: how long the epoch takes at the trial's solo speed.
        metrics: what it reports at that speed.
        speeds: the metrics that fall when the trial is slowed (samples/s).
        durations: the metrics that grow when it is slowed (step time, epoch seconds).
    """

    seconds: float
    metrics: dict[str, float]
    speeds: tuple[str, ...] = ()
    durations: tuple[str, ...] = ()

    def slowed(self, elapsed: float) -> dict[str, float]:
        """The metrics of this epoch when it took ``elapsed`` seconds instead of ``seconds``."""
        factor = elapsed / self.seconds if self.seconds > 0 else 1.0
        metrics = dict(self.metrics)
        for name in self.speeds:
            if name in metrics:
                metrics[name] /= factor
        for name in self.durations:
            if name in metrics:
                metrics[name] *= factor
        return metrics


@dataclass(frozen=True)
class TrialPlan:
    """A trial as its model predicts it.

    Attributes:
        load: the load it declares on its GPU (``None``: none), its memory included.
        epochs: its reports, in order.
        oom: set when it runs out of memory under its cap before its first report.
        oom_after_s: how long it runs before it does.
        cpus: the CPUs it keeps busy (its loop and its DataLoader workers).
        cold_start_s: how long it starts before its first step when its worker process
            is new (imports, the CUDA context, first compilations); a worker that ran a
            trial before starts the next one at once.
    """

    load: GpuLoad | None
    epochs: tuple[PlannedEpoch, ...] = ()
    oom: OomReport | None = None
    oom_after_s: float = 0.0
    cpus: float = 1.0
    cold_start_s: float = 0.0


def tightest_limit(*limits: float | None) -> float | None:
    """The smallest of the memory limits that apply (``None``: none does)."""
    known = [float(limit) for limit in limits if limit is not None]
    return min(known) if known else None


class TrialModel(Protocol):
    """Predicts a trial from its parameters and the GPU memory it has."""

    def __call__(
        self, params: dict[str, Any], gpu_memory_mb: float | None, memory_cap_mb: float | None
    ) -> TrialPlan:
        """The plan of a trial with ``params``, with what its GPU leaves it and its cap."""
