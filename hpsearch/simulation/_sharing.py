"""How trials that share a simulated GPU, and a node's CPUs, slow each other. Pure.

A trial alone on its GPU keeps it busy a share ``u`` of the time (its solo
utilisation, what NVML's ``utilization.gpu`` reads) and runs at its solo
speed. The model says how fast each trial runs when others share the GPU:

* **Time-sliced** (the default compute mode, no MPS): the GPU runs one
  process's kernels at a time, so together the trials can keep it busy at most
  100% of the time. Each progresses at ``min(1, 100 / Σu)`` of its solo speed,
  less the cost of switching between processes, paid when its kernels find
  another process's running: ``switch_cost`` times ``min(1, Σ(others' u) / 100)``.
  Measured on an NVIDIA H200 (``benchmarks/results/sharing-2026-11-26-nvidia-h200.json``,
  from ``shared/gpu-evidence/2026-11-26-h200/sharing.json``): GPU-filling
  processes keep 0.894 of one alone in aggregate at 2, 4 and 8 processes, a
  loss that does not grow with the count (``switch_cost`` = 0.106, the
  default); trials that leave the GPU idle rarely collide and lose almost
  nothing. Small-kernel loops lost less there (0.978 at 8): the default is the
  filling case, the conservative one.
* **MPS**: kernels of different processes run side by side on free SMs. A
  trial's demand is its duty cycle times the share of SMs its kernels occupy
  (``sm_share``); each progresses at ``min(1, 100 / Σ(u·s))``, bounded by
  ``mps_max_speedup`` over time-slicing (measured on the H200: small kernels
  gained 5.06x at 8 processes; HFTA, MLSys 2021, reports up to ≈2.7x), less
  ``mps_switch_cost`` on contention as above (measured: filling kernels keep
  1.035 in aggregate, so 0). Kernels that fill the GPU (``sm_share`` 1) gain
  nothing over time-slicing.
* **Memory** is not shared: each process holds its CUDA context and what it
  allocates (the simulated workload's ``context_mb``; :data:`CUDA_CONTEXT_MB`,
  610 MiB, measured on the H200 before the first tensor). An allocation past
  the GPU's free memory, or past the trial's cap, runs out of memory.
* **Fused groups** (``fusion``): K trials of one shape train as one process,
  with one context and one stream. Their kernels run as one wider kernel,
  which fills the SMs one member leaves idle before it takes longer: a fused
  step's kernels take ``u · max(1 + c·(K-1), K·s)`` of a solo step (``s``
  the member's SM share, ``c`` the per-member floor ``fused_member_cost``).
  The host's loop runs once per step and grows by ``c`` a member; it overlaps
  the kernels, so the step takes ``max(1 + c·(K-1), kernels)``. The group's
  duty cycle, kernels over step, thus grows less than linearly with K, and
  not at all while the members' host work dominates. ``c`` = 0.05 is the CPU
  measurement (``scripts/bench_fusion.py``: 16 members of a width-32 MLP in
  1.8× one member's step); the HFTA paper's 15.1× over one job per GPU for
  small models would need a smaller one, so the model is the conservative
  side of both. Memory: one context, and each member's own weights and
  activations.
* **Host CPU**: trials whose CPU demand (the training loop and its DataLoader
  workers) exceeds the node's cores slow in proportion: ``min(1, cores / Σcpus)``.

The constants are declared once, as the fields of :class:`~hpsearch.simulation.spec.SharingSpec`,
which a config sets under ``telemetry.simulated.sharing``; ``make gpu-calibrate``
writes them from a GPU's ``bench_sharing --real`` file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hpsearch.simulation.spec import SharingSpec
from hpsearch.telemetry import GpuDemand

CUDA_CONTEXT_MB = 610.0
"""What a process's CUDA context costs on its GPU before its first tensor, in MiB (measured on
an H200 with torch 2.11: ``benchmarks/results/sharing-2026-11-26-nvidia-h200.json``)."""

_SLOWEST = 0.05
"""No trial runs slower than this share of its solo speed (switch costs have a floor)."""


@dataclass(frozen=True)
class SharingModel:
    """How shared GPUs and CPUs slow trials (see the module docstring for the rules).

    Attributes:
        spec: its constants, the config's ``telemetry.simulated.sharing``.
    """

    spec: SharingSpec = field(default_factory=SharingSpec)

    @property
    def mps(self) -> bool:
        """Whether the GPU runs an MPS daemon (kernels of different trials overlap)."""
        return self.spec.mps

    def with_mps(self, mps: bool) -> SharingModel:
        """The same model, with or without MPS."""
        return SharingModel(self.spec.model_copy(update={"mps": mps}))

    def gpu_rates(self, demands: Sequence[GpuDemand]) -> list[float]:
        """Each trial's speed, as a share of its solo speed, while these share one GPU."""
        if not demands:
            return []
        busy = [max(0.0, d.utilization_pct) for d in demands]
        duty = sum(busy)
        time_sliced = min(1.0, 100.0 / duty) if duty > 0 else 1.0
        if self.mps:
            overlap = sum(u * _share(d.sm_share) for u, d in zip(busy, demands, strict=True))
            by_overlap = min(1.0, 100.0 / overlap) if overlap > 0 else 1.0
            rate = min(by_overlap, time_sliced * self.spec.mps_max_speedup)
            cost = self.spec.mps_switch_cost
        else:
            rate, cost = time_sliced, self.spec.switch_cost
        # A trial pays the switch when its kernels find another process's running:
        # as often as the others keep the GPU busy.
        return [max(_SLOWEST, rate * (1.0 - cost * min(1.0, (duty - own) / 100.0))) for own in busy]

    def throughput(self, demand: GpuDemand, trials: int) -> float:
        """Aggregate speed of ``trials`` identical trials on one GPU, in solo trials."""
        if trials <= 0:
            return 0.0
        return trials * self.gpu_rates([demand] * trials)[0]

    def utilization_pct(self, demands: Sequence[GpuDemand]) -> float:
        """What NVML would read: the share of time some kernel runs.

        Time-sliced trials take turns: their duty cycles add up, to 100% at most
        (the time spent switching still reads as busy). Under MPS their kernels
        overlap: the GPU is idle only when none of them runs.
        """
        if not self.mps:
            return min(100.0, float(sum(max(0.0, d.utilization_pct) for d in demands)))
        rates = self.gpu_rates(demands)
        idle = 1.0
        for demand, rate in zip(demands, rates, strict=True):
            idle *= 1.0 - min(1.0, max(0.0, demand.utilization_pct) * rate / 100.0)
        return 100.0 * (1.0 - idle)

    def fused(self, demand: GpuDemand, members: int) -> FusedDemand:
        """What a fused group of ``members`` trials of ``demand`` asks of its GPU (one process)."""
        if members <= 1:
            return FusedDemand(demand, 1.0)
        floor = 1.0 + self.spec.fused_member_cost * (members - 1)
        share = _share(demand.sm_share)
        kernels = max(0.0, min(100.0, demand.utilization_pct)) / 100.0 * max(floor, members * share)
        step = max(floor, kernels)
        # Kernels that fill the step keep it 100% busy (min: x * 100 / x may round over).
        grouped = GpuDemand(min(100.0, 100.0 * kernels / step), min(1.0, members * share))
        return FusedDemand(grouped, step)


@dataclass(frozen=True)
class FusedDemand:
    """A fused group as one process on its GPU.

    Attributes:
        demand: the group's duty cycle and SM share.
        slowdown: its step over one member's step alone.
    """

    demand: GpuDemand
    slowdown: float


def fused_memory_mb(memory_mb: float, members: int, context_mb: float = CUDA_CONTEXT_MB) -> float:
    """A fused group's memory: one process's (its context included), and each other member's
    own weights and activations."""
    return memory_mb + max(0, members - 1) * max(0.0, memory_mb - context_mb)


def cpu_rate(cores: float, demands: Sequence[float]) -> float:
    """The speed of every trial on a node whose trials ask for ``demands`` CPUs in all."""
    total = sum(demands)
    if total <= 0 or cores <= 0:
        return 1.0
    return min(1.0, cores / total)


def _share(value: float) -> float:
    return min(1.0, max(0.0, value))
