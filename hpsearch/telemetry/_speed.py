"""A trial's own speed: what it would have measured alone on its GPU. Pure.

A trial that shares its GPU measures its neighbours' load in its own
throughput. Every speed metric a trial reports gets a solo-equivalent twin,
``<metric>_solo``: the measured value divided by the share of its solo speed
the trial ran at over the interval it measured (a duration is multiplied by
it). That share comes from the sharing model (:mod:`hpsearch.telemetry._sharing`),
fed with what the GPU's readings say (see :class:`hpsearch.telemetry.TrialGpuMetrics`).
Objectives on a speed metric read the twin, so the Pareto front compares
trials as if each had run alone.
"""

from __future__ import annotations

from collections.abc import Mapping

SOLO_SUFFIX = "_solo"
"""The suffix of a speed metric's solo-equivalent twin."""

SPEED_SHARE = "gpu_speed_share"
"""The metric a trial's share of its solo speed is logged as, per report."""

RATE_SUFFIXES = ("_per_sec", "_per_s")
"""Metrics named so are rates: sharing lowers them."""

DURATIONS = frozenset({"step_time_ms", "step_time_s", "epoch_seconds", "epoch_s"})
"""Metrics that are times per unit of work: sharing raises them."""


def is_speed(metric: str) -> bool:
    """Whether sharing a GPU changes ``metric`` (a rate or a duration per unit of work)."""
    if metric.endswith(SOLO_SUFFIX):
        return False
    return metric.endswith(RATE_SUFFIXES) or metric in DURATIONS


def solo_name(metric: str) -> str:
    """The name of ``metric``'s solo-equivalent twin."""
    return metric + SOLO_SUFFIX


def solo_metrics(metrics: Mapping[str, float], share: float) -> dict[str, float]:
    """The solo-equivalent twin of every speed metric in ``metrics``.

    Args:
        metrics: what a trial reported.
        share: the share of its solo speed it ran at while it measured them (0-1].
    """
    share = min(1.0, max(share, 1e-6))
    twins: dict[str, float] = {}
    for name, value in metrics.items():
        if not is_speed(name):
            continue
        twins[solo_name(name)] = value * share if name in DURATIONS else value / share
    return twins


def objective_reading(metrics: Mapping[str, float], metric: str) -> float | None:
    """An objective's value from a trial's metrics: a speed metric's solo twin when there is one."""
    if is_speed(metric) and solo_name(metric) in metrics:
        return metrics[solo_name(metric)]
    return metrics.get(metric)
