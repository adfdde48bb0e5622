"""From raw GPU samples to what a person (or the packing policy) can act on.

Pure functions: no clock, no I/O. Readings a GPU cannot have produced are
flagged as measurement errors and left out of the summary; the summary keeps
them in :attr:`GpuSummary.dropped` so a report can say how many and which.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from hpsearch.telemetry._base import GpuSample

POWER_SPIKE_FACTOR = 1.5
"""A power reading above this many times the board limit is a measurement error, not a load."""


class Reading(StrEnum):
    """The quantities a sample carries that can be implausible."""

    UTILIZATION = "utilization"
    MEMORY = "memory"
    POWER = "power"


@dataclass(frozen=True)
class DroppedReading:
    """One implausible reading, left out of the summary."""

    time: float
    reading: Reading
    value: float
    reason: str


def implausible_readings(sample: GpuSample) -> list[DroppedReading]:
    """The readings of ``sample`` that no GPU can produce (each with the rule it broke)."""
    dropped = []
    util = sample.utilization_pct
    if util is not None and not 0 <= util <= 100:
        dropped.append(
            DroppedReading(sample.time, Reading.UTILIZATION, util, f"{util:g}% is outside 0-100%")
        )
    used, total = sample.memory_used_mb, sample.memory_total_mb
    if used is not None and (used < 0 or (total is not None and used > total)):
        dropped.append(
            DroppedReading(
                sample.time,
                Reading.MEMORY,
                used,
                f"{used:.0f} MiB used is above the {total:.0f} MiB total"
                if total is not None and used > total
                else f"{used:.0f} MiB used is negative",
            )
        )
    power, limit = sample.power_w, sample.power_limit_w
    if power is not None and (
        power < 0 or (limit is not None and power > POWER_SPIKE_FACTOR * limit)
    ):
        reason = f"{power:.1f} W is negative"
        if limit is not None and power > POWER_SPIKE_FACTOR * limit:
            reason = (
                f"{power:.1f} W is above {POWER_SPIKE_FACTOR:g} × the {limit:.0f} W board limit "
                f"({POWER_SPIKE_FACTOR * limit:.1f} W)"
            )
        dropped.append(DroppedReading(sample.time, Reading.POWER, power, reason))
    return dropped


@dataclass(frozen=True)
class Stats:
    """Mean, minimum, maximum and 95th percentile (nearest rank) of a series."""

    mean: float
    min: float
    max: float
    p95: float
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats | None:
        """The stats of ``values``; ``None`` when there are none."""
        if not values:
            return None
        series = np.asarray(values, dtype=float)
        return cls(
            mean=float(series.mean()),
            min=float(series.min()),
            max=float(series.max()),
            p95=float(np.percentile(series, 95, method="inverted_cdf")),  # nearest rank
            count=len(series),
        )


@dataclass(frozen=True)
class GpuSummary:
    """What one GPU did over a stretch of samples.

    Attributes:
        index, name: which GPU.
        samples: readings taken (errors included).
        errors: readings the GPU failed to answer.
        start, end: time of the first and last reading.
        utilization: stats of the plausible utilisation readings (%).
        memory_used: stats of the plausible memory readings (MiB).
        memory_total_mb: the GPU's memory.
        power: stats of the plausible power readings (W).
        power_all: stats of every power reading, the dropped ones included (what a naive
            average would have said).
        power_limit_w: the board's power limit.
        temperature_max_c: hottest reading.
        dropped: readings left out as measurement errors.
    """

    index: int
    name: str
    samples: int
    errors: int
    start: float
    end: float
    utilization: Stats | None
    memory_used: Stats | None
    memory_total_mb: float | None
    power: Stats | None
    power_all: Stats | None
    power_limit_w: float | None
    temperature_max_c: float | None
    dropped: tuple[DroppedReading, ...]

    @property
    def duration_s(self) -> float:
        """Seconds from the first to the last reading."""
        return self.end - self.start

    @property
    def memory_peak_share(self) -> float | None:
        """Peak memory as a share (0-1) of the GPU's memory."""
        if self.memory_used is None or not self.memory_total_mb:
            return None
        return self.memory_used.max / self.memory_total_mb

    @property
    def memory_mean_share(self) -> float | None:
        """Mean memory as a share (0-1) of the GPU's memory."""
        if self.memory_used is None or not self.memory_total_mb:
            return None
        return self.memory_used.mean / self.memory_total_mb

    def dropped_count(self, reading: Reading) -> int:
        """How many readings of one kind were dropped."""
        return sum(d.reading is reading for d in self.dropped)


def summarize(samples: Sequence[GpuSample]) -> GpuSummary:
    """Summarise the samples of one GPU (implausible readings left out and counted).

    Raises:
        ValueError: no samples, or samples of several GPUs.
    """
    if not samples:
        raise ValueError("no samples to summarise")
    indices = {s.index for s in samples}
    if len(indices) != 1:
        raise ValueError(f"samples of several GPUs ({sorted(indices)}); summarise one at a time")
    read = [s for s in samples if not s.error]
    dropped = [d for s in read for d in implausible_readings(s)]
    bad = {(d.time, d.reading) for d in dropped}

    def plausible(reading: Reading, values: list[tuple[float, float | None]]) -> list[float]:
        return [v for t, v in values if v is not None and (t, reading) not in bad]

    last = samples[-1]
    totals = [s.memory_total_mb for s in read if s.memory_total_mb is not None]
    limits = [s.power_limit_w for s in read if s.power_limit_w is not None]
    temperatures = [s.temperature_c for s in read if s.temperature_c is not None]
    return GpuSummary(
        index=last.index,
        name=last.name,
        samples=len(samples),
        errors=len(samples) - len(read),
        start=samples[0].time,
        end=last.time,
        utilization=Stats.of(
            plausible(Reading.UTILIZATION, [(s.time, s.utilization_pct) for s in read])
        ),
        memory_used=Stats.of(plausible(Reading.MEMORY, [(s.time, s.memory_used_mb) for s in read])),
        memory_total_mb=max(totals) if totals else None,
        power=Stats.of(plausible(Reading.POWER, [(s.time, s.power_w) for s in read])),
        power_all=Stats.of([s.power_w for s in read if s.power_w is not None]),
        power_limit_w=max(limits) if limits else None,
        temperature_max_c=max(temperatures) if temperatures else None,
        dropped=tuple(dropped),
    )
