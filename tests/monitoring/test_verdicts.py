"""Verdicts and recommendations computed from summaries, with the arithmetic in the text."""

from __future__ import annotations

import pytest

from hpsearch.monitoring import (
    Verdict,
    packing_estimate,
    recommendations,
    render_report,
    verdict_of,
)
from hpsearch.simulation import trace_path
from hpsearch.telemetry import GpuSample, read_trace, summarize
from hpsearch.telemetry._summary import GpuSummary


def _flat(util: float, memory: float = 500.0, total: float = 6141.0) -> GpuSummary:
    return summarize(
        [
            GpuSample(
                time=float(t),
                index=0,
                name="gpu",
                utilization_pct=util,
                memory_used_mb=memory,
                memory_total_mb=total,
            )
            for t in range(5)
        ]
    )


@pytest.mark.parametrize(
    ("util", "memory", "expected"),
    [
        (0.0, 100.0, Verdict.IDLE),
        (11.4, 167.0, Verdict.VERY_LOW),
        (35.0, 500.0, Verdict.LOW),
        (70.0, 500.0, Verdict.GOOD),
        (95.0, 500.0, Verdict.SATURATED),
        (20.0, 5600.0, Verdict.SATURATED),  # memory nearly full, whatever the utilisation
    ],
)
def test_verdicts(util: float, memory: float, expected: Verdict) -> None:
    assert verdict_of(_flat(util, memory)) is expected


def test_seed_004_recommends_packing_and_a_larger_batch_with_arithmetic() -> None:
    summary = summarize(read_trace(trace_path("rtx4050-seed004")))
    estimate = packing_estimate(summary)
    assert (estimate.by_utilization, estimate.by_memory, estimate.trials) == (8, 33, 8)
    text = "\n".join(recommendations(summary))
    assert "11.4% utilisation, 2.7% memory: input-bound or small batch" in text
    assert "6141 MiB × 0.90 usable = 5527 MiB; 5527 / 167 MiB peak = 33.1" in text
    assert "pack about 8 trials" in text
    assert "11.4% each, most throughput at 8 (duty cycles 8 × 11.4% ≤ 100% busy)" in text
    assert "mean 20.5 W without the dropped reading(s), 26.8 W with them" in text


def test_memory_heavy_workload_packs_one_by_memory() -> None:
    estimate = packing_estimate(_flat(11.0, 3500.0))
    assert (estimate.by_utilization, estimate.by_memory, estimate.trials) == (8, 1, 1)


def test_saturated_gpu_is_left_alone() -> None:
    summary = summarize(read_trace(trace_path("rtx3090-seed001")))
    (line,) = recommendations(summary)
    assert "keep one trial on this GPU" in line
    assert packing_estimate(summary).trials == 1


def test_target_changes_the_estimate() -> None:
    summary = _flat(20.0, 100.0)
    assert packing_estimate(summary, target_util_pct=60).by_utilization == 3
    assert packing_estimate(summary, target_util_pct=90).by_utilization == 4
    assert packing_estimate(summary).by_utilization == 5  # 100% busy: the most throughput


@pytest.mark.parametrize("util", [3.0, 11.4, 20.0, 30.0, 45.0, 60.0, 88.0, 95.0])
@pytest.mark.parametrize("memory", [167.0, 900.0, 2500.0, 6000.0])
def test_the_monitor_and_the_packing_policy_agree(util: float, memory: float) -> None:
    # One arithmetic: the monitor's "pack about N" is the count the policy climbs to.
    from hpsearch.placement import (
        GpuKey,
        GpuView,
        PackingPolicy,
        PackingSpec,
        PackingView,
        TrialOnGpu,
    )

    policy = PackingPolicy(PackingSpec(probe_seconds=1))
    gpu = GpuKey("node", 0)
    alone = GpuView(gpu, 6141.0, (TrialOnGpu(0, warm_at=0.0, memory_mb=memory),), 0.0, util, memory)
    view = PackingView(now=2.0, gpus=(alone,), node_cpus={"node": 64.0})
    policy.decide(view)  # learns the trial's profile, rises
    decided = policy.decide(PackingView(now=20.0, gpus=(alone,), node_cpus={"node": 64.0}))
    assert decided[gpu].limit == packing_estimate(_flat(util, memory)).trials


def test_report_lists_each_gpu_its_verdict_and_the_dropped_readings() -> None:
    seed = summarize(read_trace(trace_path("rtx4050-seed004")))
    busy = summarize(read_trace(trace_path("rtx3090-seed001")))
    report = render_report(
        [seed, busy], source="test", interval_s=1.0, sampler_cpu_s=0.01, wall_s=10.0
    )
    assert "sampler cost: 0.010 s CPU over 10.0 s wall = 0.100% of one core" in report
    assert "GPU 0  NVIDIA GeForce RTX 4050 Laptop GPU: very low" in report
    assert "GPU 0  NVIDIA GeForce RTX 3090: saturated" in report
    assert "1 reading(s) flagged as measurement errors" in report
    assert "power at +20.0 s: 590.0 W is above 1.5 × the 115 W board limit" in report
    assert "dropped      none" in report
