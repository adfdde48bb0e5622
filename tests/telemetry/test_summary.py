"""Summaries of GPU samples, and the readings flagged as measurement errors."""

from __future__ import annotations

import pytest

from hpsearch.simulation import trace_path
from hpsearch.telemetry import (
    GpuSample,
    Reading,
    Stats,
    implausible_readings,
    read_trace,
    summarize,
)


def _sample(t: float = 0.0, **values: float | None) -> GpuSample:
    base: dict[str, float | None] = {
        "utilization_pct": 50.0,
        "memory_used_mb": 1000.0,
        "memory_total_mb": 6141.0,
        "power_w": 60.0,
        "power_limit_w": 115.0,
    }
    base.update(values)
    return GpuSample(time=t, index=0, name="gpu", **base)  # type: ignore[arg-type]


def test_seed_004_trace_summarises_to_the_notes_numbers_without_the_spike() -> None:
    summary = summarize(read_trace(trace_path("rtx4050-seed004")))
    assert summary.samples == 90
    assert summary.utilization is not None
    assert summary.utilization.mean == pytest.approx(11.4)
    assert (summary.utilization.min, summary.utilization.max) == (0.0, 20.0)
    assert summary.memory_used is not None
    assert summary.memory_used.max == 167.0
    assert summary.memory_peak_share == pytest.approx(0.027, abs=5e-4)
    assert summary.memory_mean_share == pytest.approx(0.022, abs=5e-4)
    # The note's naive figures, spike included...
    assert summary.power_all is not None
    assert summary.power_all.mean == pytest.approx(26.8, abs=0.01)
    assert summary.power_all.max == 590.0
    assert summary.power_all.min == pytest.approx(1.7)
    # ...and the summary's, without it.
    assert summary.power is not None
    assert summary.power.max < 115.0
    assert summary.power.mean == pytest.approx((26.8 * 90 - 590.0) / 89, abs=0.01)
    assert summary.dropped_count(Reading.POWER) == 1
    (spike,) = summary.dropped
    assert spike.value == 590.0
    assert "above 1.5 × the 115 W board limit (172.5 W)" in spike.reason


@pytest.mark.parametrize(
    ("values", "reading"),
    [
        ({"utilization_pct": 101.0}, Reading.UTILIZATION),
        ({"utilization_pct": -1.0}, Reading.UTILIZATION),
        ({"memory_used_mb": 6142.0}, Reading.MEMORY),
        ({"memory_used_mb": -5.0}, Reading.MEMORY),
        ({"power_w": 172.6}, Reading.POWER),
        ({"power_w": -1.0}, Reading.POWER),
    ],
)
def test_implausible_readings_are_flagged(values: dict[str, float], reading: Reading) -> None:
    (flag,) = implausible_readings(_sample(**values))
    assert flag.reading is reading


def test_plausible_extremes_are_kept() -> None:
    edge = _sample(utilization_pct=100.0, memory_used_mb=6141.0, power_w=172.5)
    assert implausible_readings(edge) == []
    # Without a known limit no power reading can be judged too high.
    assert implausible_readings(_sample(power_w=5000.0, power_limit_w=None)) == []


def test_flagged_reading_leaves_only_its_own_quantity() -> None:
    samples = [_sample(0, utilization_pct=10.0), _sample(1, utilization_pct=30.0, power_w=900.0)]
    summary = summarize(samples)
    assert summary.utilization is not None
    assert summary.utilization.mean == 20.0  # the spiking sample's utilisation still counts
    assert summary.power is not None
    assert summary.power.count == 1
    assert summary.dropped_count(Reading.POWER) == 1
    assert summary.dropped_count(Reading.UTILIZATION) == 0


def test_failed_readings_are_counted_not_summarised() -> None:
    samples = [_sample(0), GpuSample(time=1, index=0, name="gpu", error="GPU is lost"), _sample(2)]
    summary = summarize(samples)
    assert (summary.samples, summary.errors) == (3, 1)
    assert summary.utilization is not None
    assert summary.utilization.count == 2
    assert summary.duration_s == 2


def test_summarize_one_gpu_at_a_time() -> None:
    with pytest.raises(ValueError, match="several GPUs"):
        summarize([_sample(), GpuSample(time=0, index=1, name="other")])
    with pytest.raises(ValueError, match="no samples"):
        summarize([])


def test_p95_is_nearest_rank() -> None:
    stats = Stats.of([float(v) for v in range(1, 101)])
    assert stats is not None
    assert (stats.p95, stats.mean, stats.count) == (95.0, 50.5, 100)
    single = Stats.of([7.0])
    assert single is not None
    assert single.p95 == 7.0
    assert Stats.of([]) is None
