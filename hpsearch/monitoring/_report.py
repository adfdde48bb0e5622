"""The end-of-monitoring report: per GPU, what it did, a verdict and what to do about it."""

from __future__ import annotations

from collections.abc import Sequence

from hpsearch.monitoring._verdicts import recommendations, verdict_of
from hpsearch.placement import MEMORY_HEADROOM, TARGET_UTIL_PCT
from hpsearch.telemetry import GpuSummary, Stats


def render_report(
    summaries: Sequence[GpuSummary],
    *,
    source: str,
    interval_s: float,
    sampler_cpu_s: float | None = None,
    wall_s: float | None = None,
    target_util_pct: float = TARGET_UTIL_PCT,
    memory_headroom: float = MEMORY_HEADROOM,
) -> str:
    """The report as plain text (Markdown-friendly), one block per GPU."""
    lines = []
    count = max((s.samples for s in summaries), default=0)
    span = max((s.duration_s for s in summaries), default=0.0)
    lines.append(
        f"GPU report: {count} samples per GPU over {span:.1f} s "
        f"(interval {interval_s:g} s); {source}"
    )
    if sampler_cpu_s is not None and wall_s:
        lines.append(
            f"sampler cost: {sampler_cpu_s:.3f} s CPU over {wall_s:.1f} s wall = "
            f"{100 * sampler_cpu_s / wall_s:.3f}% of one core"
        )
    if not summaries:
        lines.append("no GPU was sampled")
    for summary in summaries:
        lines.append("")
        lines += _gpu_block(summary, target_util_pct, memory_headroom)
    return "\n".join(lines) + "\n"


def _gpu_block(summary: GpuSummary, target_util_pct: float, memory_headroom: float) -> list[str]:
    lines = [f"GPU {summary.index}  {summary.name}: {verdict_of(summary).value}"]
    if summary.errors:
        lines.append(f"  errors       {summary.errors} of {summary.samples} readings failed")
    lines.append(f"  utilisation  {_stats(summary.utilization, '%', '.1f')}")
    memory = summary.memory_used
    if memory is not None:
        total = f" of {summary.memory_total_mb:.0f} MiB" if summary.memory_total_mb else ""
        peak_share = summary.memory_peak_share
        mean_share = summary.memory_mean_share
        lines.append(
            f"  memory       peak {memory.max:.0f} MiB{total}"
            + (f" ({peak_share:.1%})" if peak_share is not None else "")
            + f", mean {memory.mean:.0f} MiB"
            + (f" ({mean_share:.1%})" if mean_share is not None else "")
        )
    else:
        lines.append("  memory       not available")
    limit = f" (limit {summary.power_limit_w:.0f} W)" if summary.power_limit_w else ""
    if summary.power is not None:
        power = summary.power
        lines.append(
            f"  power        mean {power.mean:.1f} W, min {power.min:.1f} W, "
            f"peak {power.max:.1f} W{limit}"
        )
    else:
        lines.append("  power        not available")
    if summary.temperature_max_c is not None:
        lines.append(f"  temperature  max {summary.temperature_max_c:.0f} °C")
    if summary.dropped:
        lines.append(
            f"  dropped      {len(summary.dropped)} reading(s) flagged as measurement errors, "
            "left out of the figures above:"
        )
        lines += [
            f"    {d.reading.value} at +{d.time - summary.start:.1f} s: {d.reason}"
            for d in summary.dropped
        ]
    else:
        lines.append("  dropped      none (every reading plausible)")
    lines.append("  recommendations")
    lines += [
        f"    - {text}"
        for text in recommendations(
            summary, target_util_pct=target_util_pct, memory_headroom=memory_headroom
        )
    ]
    return lines


def _stats(stats: Stats | None, unit: str, fmt: str) -> str:
    if stats is None:
        return "not available"
    return (
        f"mean {stats.mean:{fmt}}{unit}, min {stats.min:{fmt}}{unit}, "
        f"max {stats.max:{fmt}}{unit}, p95 {stats.p95:{fmt}}{unit}"
    )
