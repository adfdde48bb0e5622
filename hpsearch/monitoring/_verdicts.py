"""A verdict on how well a GPU was used, and recommendations with their arithmetic shown.

Pure functions of a :class:`~hpsearch.telemetry.GpuSummary`, whose packing
arithmetic is the packing policy's own (:func:`hpsearch.placement.fit`). The report prints
the numbers each recommendation comes from, so a reader can check it rather than
trust it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from hpsearch.placement import MEMORY_HEADROOM, TARGET_UTIL_PCT, fit
from hpsearch.telemetry import GpuSummary, Reading


class Verdict(StrEnum):
    """How busy a GPU was, from its mean utilisation (and its memory)."""

    IDLE = "idle"
    VERY_LOW = "very low"
    LOW = "low"
    GOOD = "good"
    SATURATED = "saturated"
    UNKNOWN = "unknown"


# Upper bounds (exclusive) of mean utilisation for each verdict, in %.
IDLE_BELOW = 5.0
VERY_LOW_BELOW = 20.0
LOW_BELOW = 50.0
SATURATED_FROM = 90.0
MEMORY_SATURATED_FROM = 0.90
"""Peak memory share from which a GPU counts as saturated whatever its utilisation."""

_BY_UTILIZATION = (
    (IDLE_BELOW, Verdict.IDLE),
    (VERY_LOW_BELOW, Verdict.VERY_LOW),
    (LOW_BELOW, Verdict.LOW),
    (SATURATED_FROM, Verdict.GOOD),
)


@dataclass(frozen=True)
class PackingEstimate:
    """How many trials like the measured one would fit on the GPU, and why.

    Attributes:
        by_utilization: trials whose summed mean utilisation stays under the target.
        by_memory: trials whose summed peak memory fits the usable memory.
        trials: the smaller of the two (at least 1).
        usable_memory_mb: the GPU's memory less the headroom.
    """

    by_utilization: int | None
    by_memory: int | None
    trials: int
    usable_memory_mb: float | None


def verdict_of(summary: GpuSummary) -> Verdict:
    """The verdict for one GPU."""
    share = summary.memory_peak_share
    if share is not None and share >= MEMORY_SATURATED_FROM:
        return Verdict.SATURATED
    if summary.utilization is None:
        return Verdict.UNKNOWN
    mean = summary.utilization.mean
    for below, kind in _BY_UTILIZATION:
        if mean < below:
            return kind
    return Verdict.SATURATED


def packing_estimate(
    summary: GpuSummary,
    *,
    target_util_pct: float = TARGET_UTIL_PCT,
    memory_headroom: float = MEMORY_HEADROOM,
) -> PackingEstimate:
    """How many trials of the measured size this GPU could hold at once.

    The packing policy's own arithmetic (:func:`~hpsearch.telemetry.fit`), with its defaults.
    """
    util = summary.utilization.mean if summary.utilization is not None else None
    peak = summary.memory_used.max if summary.memory_used is not None else None
    fitted = fit(
        util,
        peak,
        summary.memory_total_mb,
        target_util_pct=target_util_pct,
        memory_headroom=memory_headroom,
    )
    return PackingEstimate(
        fitted.by_utilization, fitted.by_memory, fitted.trials, fitted.usable_memory_mb
    )


def recommendations(
    summary: GpuSummary,
    *,
    target_util_pct: float = TARGET_UTIL_PCT,
    memory_headroom: float = MEMORY_HEADROOM,
) -> list[str]:
    """What to do about this GPU, each line with the numbers it comes from."""
    lines: list[str] = []
    kind = verdict_of(summary)
    util = summary.utilization
    memory = summary.memory_used
    share = summary.memory_peak_share
    estimate = packing_estimate(
        summary, target_util_pct=target_util_pct, memory_headroom=memory_headroom
    )

    if kind is Verdict.UNKNOWN:
        lines.append("no utilisation reading was usable; nothing to recommend")
    elif kind is Verdict.IDLE:
        assert util is not None
        lines.append(
            f"{util.mean:.1f}% mean utilisation: nothing ran on this GPU, or the training "
            "never reached it (check that the model and batches are moved to ctx.device)"
        )
    elif kind is Verdict.SATURATED:
        what = (
            f"{share:.0%} of memory at peak"
            if share is not None and share >= MEMORY_SATURATED_FROM
            else f"{util.mean:.1f}% mean utilisation"
            if util is not None
            else "saturated"
        )
        lines.append(
            f"{what}: keep one trial on this GPU; more speed must come from the trial itself "
            "(mixed precision, TF32, channels_last, torch.compile), not from packing"
        )
    elif kind is Verdict.GOOD:
        assert util is not None
        lines.append(
            f"{util.mean:.1f}% mean utilisation is good use: "
            f"{estimate.by_utilization} trial(s) of this size predicted fastest "
            "(time-sliced trials take turns once their duty cycles pass 100%); "
            "packing more would make them wait on each other"
        )
    else:
        assert util is not None
        share_text = f", {share:.1%} memory" if share is not None else ""
        lines.append(
            f"{util.mean:.1f}% utilisation{share_text}: input-bound or small batch; "
            "the GPU waits for work most of the time"
        )
        if memory is not None and estimate.usable_memory_mb is not None and memory.max > 0:
            total = summary.memory_total_mb
            factor = estimate.usable_memory_mb / memory.max
            lines.append(
                f"memory headroom allows about {factor:.1f}× the batch "
                f"({total:.0f} MiB × {1 - memory_headroom:.2f} usable = "
                f"{estimate.usable_memory_mb:.0f} MiB; {estimate.usable_memory_mb:.0f} / "
                f"{memory.max:.0f} MiB peak = {factor:.1f}; an upper bound, as the CUDA "
                "context and the weights do not grow with the batch)"
            )
        lines.append(_packing_line(estimate, summary, target_util_pct))
        lines.append(
            "if a larger batch does not raise utilisation, the input pipeline is the limit: "
            "more DataLoader workers, pin_memory=True, persistent_workers=True"
        )
    if summary.dropped_count(Reading.POWER) and summary.power and summary.power_all:
        lines.append(
            f"power: mean {summary.power.mean:.1f} W without the dropped reading(s), "
            f"{summary.power_all.mean:.1f} W with them; "
            f"peak {summary.power.max:.1f} W, not {summary.power_all.max:.1f} W"
        )
    return lines


def _packing_line(estimate: PackingEstimate, summary: GpuSummary, target_util_pct: float) -> str:
    parts = []
    if estimate.by_utilization is not None and summary.utilization is not None:
        mean = summary.utilization.mean
        parts.append(
            f"by utilisation {mean:.1f}% each, most throughput at {estimate.by_utilization} "
            f"(duty cycles {estimate.by_utilization} × {mean:.1f}% ≤ {target_util_pct:g}% busy)"
        )
    if (
        estimate.by_memory is not None
        and estimate.usable_memory_mb is not None
        and summary.memory_used is not None
    ):
        peak = summary.memory_used.max
        parts.append(
            f"by memory {estimate.usable_memory_mb:.0f} MiB / {peak:.0f} MiB peak = "
            f"{estimate.usable_memory_mb / peak:.1f} → {estimate.by_memory}"
        )
    arithmetic = "; ".join(parts)
    return (
        f"or pack about {estimate.trials} trials of this size on this GPU "
        f"({arithmetic}; the smaller wins)"
    )
