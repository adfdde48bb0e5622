"""How many trials of a measured size one GPU should hold: the one arithmetic of packing.

The packing policy (``hpsearch.placement``) and the monitor's advice
(``hpsearch monitor``'s "pack about N trials") both call :func:`fit`, with the
defaults below, so they cannot disagree.

By utilisation, the count is the one the sharing model predicts the most
aggregate throughput for: trials that leave the GPU idle fill it until their
duty cycles add up to about 100% (past that they take turns and each extra
process costs its switch). Each trial more must add :data:`MIN_GAIN` of
throughput, and a count never rises past ``target_util`` of predicted busy
time. By memory, the trials' peaks must fit the GPU's memory less
``memory_headroom``. The smaller count wins, and ``most`` bounds both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpsearch.placement.settings import (
    MEMORY_HEADROOM,
    MOST_TRIALS_PER_GPU,
    TARGET_UTIL_PCT,
)
from hpsearch.simulation import SharingModel
from hpsearch.telemetry import GpuDemand

MIN_GAIN = 0.05
"""One trial more must add at least this share to the predicted throughput (else not worth it)."""


@dataclass(frozen=True)
class Fit:
    """How many trials of one size a GPU should hold, and the arithmetic behind it.

    Attributes:
        by_utilization: the count with the most predicted throughput (``None``: no
            utilisation known).
        throughput: that count's predicted aggregate speed, in solo trials.
        by_memory: the most whose peaks fit (``None``: no memory known).
        usable_memory_mb: the GPU's memory less the headroom.
        trials: the count: the smaller of the two and ``most`` (at least 1).
    """

    by_utilization: int | None
    throughput: float | None
    by_memory: int | None
    usable_memory_mb: float | None
    trials: int

    def arithmetic(self, utilization_pct: float | None, memory_mb: float | None) -> list[str]:
        """The figures each bound comes from, one phrase per bound."""
        parts = []
        if self.by_utilization is not None and utilization_pct is not None:
            parts.append(
                f"throughput {utilization_pct:.1f}% each → {self.by_utilization} "
                f"(≈{self.throughput:.2f}× one trial alone)"
            )
        if self.by_memory is not None and self.usable_memory_mb is not None and memory_mb:
            parts.append(
                f"memory {self.usable_memory_mb:.0f}/{memory_mb:.0f} MiB → {self.by_memory}"
            )
        return parts


def fit(
    utilization_pct: float | None,
    memory_mb: float | None,
    memory_total_mb: float | None,
    *,
    most: int = MOST_TRIALS_PER_GPU,
    target_util_pct: float = TARGET_UTIL_PCT,
    memory_headroom: float = MEMORY_HEADROOM,
    sharing: SharingModel | None = None,
) -> Fit:
    """How many trials that each use ``utilization_pct`` and ``memory_mb`` the GPU should hold."""
    model = sharing or SharingModel()
    by_util = throughput = None
    if utilization_pct is not None and utilization_pct > 0:
        demand = GpuDemand(utilization_pct)
        by_util, throughput = 1, model.throughput(demand, 1)
        for n in range(2, max(1, most) + 1):
            more = model.throughput(demand, n)
            worth_it = more >= throughput * (1 + MIN_GAIN)
            if not worth_it or min(100.0, n * utilization_pct) > target_util_pct:
                break  # the first count past which throughput stops growing enough
            by_util, throughput = n, more
    usable = by_memory = None
    if memory_total_mb:
        usable = memory_total_mb * (1 - memory_headroom)
        if memory_mb:
            by_memory = max(1, math.floor(usable / memory_mb))
    known = [n for n in (by_util, by_memory) if n is not None]
    trials = max(1, min([*known, most]))
    return Fit(by_util, throughput, by_memory, usable, trials)
