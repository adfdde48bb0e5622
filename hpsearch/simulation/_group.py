"""A modelled fused group: its members' plans, played as one process.

The simulated workload's members function (``simulated_gpu.train_members``)
plays it in real time and the simulated-time runner on a virtual clock, so both
see the same group: its memory, whether it runs out, the load it declares and
how much slower than one member alone each of its epochs runs, by the sharing
model's rule for fused groups (:meth:`~hpsearch.simulation.SharingModel.fused`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hpsearch.oom import OomReport
from hpsearch.simulation._plan import TrialPlan
from hpsearch.simulation._sharing import CUDA_CONTEXT_MB, SharingModel, fused_memory_mb
from hpsearch.telemetry import GpuDemand, GpuLoad


@dataclass(frozen=True)
class GroupPlan:
    """A fused group as its members' model predicts it.

    Attributes:
        plans: each member's plan, as it would run alone (one shape: one load).
        limit_mb: the memory the group has (``None``: no limit known).
        context_mb: what the process's context holds before its first tensor.
        sharing: the sharing model whose fused rule slows the group's steps.
    """

    plans: tuple[TrialPlan, ...]
    limit_mb: float | None = None
    context_mb: float = CUDA_CONTEXT_MB
    sharing: SharingModel = field(default_factory=SharingModel)

    @property
    def memory_mb(self) -> float | None:
        """The group's device memory (``None``: its members declare no load)."""
        load = self.plans[0].load
        if load is None:
            return None
        return fused_memory_mb(load.memory_mb, len(self.plans), self.context_mb)

    @property
    def oom(self) -> OomReport | None:
        """Why the group runs out of memory at its first step (``None``: it does not)."""
        alone = next((p.oom for p in self.plans if p.oom is not None), None)
        memory = self.memory_mb
        over = self.limit_mb is not None and memory is not None and memory > self.limit_mb
        if alone is None and not over:
            return None
        message = (
            f"CUDA out of memory (simulated: a fused group of {len(self.plans)} needs "
            f"{memory or 0:.0f} MiB, {self.limit_mb or 0:.0f} MiB available)"
        )
        return OomReport("torch", message, peak_mb=self.limit_mb)

    @property
    def oom_after_s(self) -> float:
        """How long the group runs before it runs out (as its first member would)."""
        return max((p.oom_after_s for p in self.plans), default=0.0)

    def load(self, members: int | None = None) -> GpuLoad | None:
        """The load the group declares with ``members`` training (default: all of them)."""
        solo = self.plans[0].load
        if solo is None:
            return None
        count = len(self.plans) if members is None else members
        grouped = self.sharing.fused(GpuDemand(solo.utilization_pct, solo.sm_share), count)
        return GpuLoad(
            grouped.demand.utilization_pct,
            self.memory_mb or solo.memory_mb,
            grouped.demand.sm_share,
            solo.cpus,
        )

    def slowdown(self, members: int) -> float:
        """A step of the group with ``members`` training, over one member's alone."""
        solo = self.plans[0].load
        if solo is None:
            return 1.0 + self.sharing.spec.fused_member_cost * max(0, members - 1)
        demand = GpuDemand(solo.utilization_pct, solo.sm_share)
        return self.sharing.fused(demand, members).slowdown

    @property
    def cpus(self) -> float:
        """The CPUs the group's process keeps busy (one loop for all its members)."""
        return self.plans[0].cpus
