"""The sharing model: how trials on one simulated GPU (and one node's CPUs) slow each other."""

from __future__ import annotations

import pytest

from hpsearch.simulation import SharingModel, SharingSpec, cpu_rate
from hpsearch.telemetry import GpuDemand

TIME_SLICED = SharingModel()
MPS = SharingModel(SharingSpec(mps=True))


def test_a_trial_alone_runs_at_its_solo_speed() -> None:
    assert TIME_SLICED.gpu_rates([GpuDemand(95.0)]) == [1.0]
    assert MPS.gpu_rates([GpuDemand(95.0, sm_share=0.3)]) == [1.0]
    assert TIME_SLICED.gpu_rates([]) == []


def test_idle_trials_rarely_collide_until_their_duty_cycles_fill_the_gpu() -> None:
    # The seeds' 11%: seven fit in 100%; each pays the switch as often as the six
    # others keep the GPU busy (66% of the time).
    rates = TIME_SLICED.gpu_rates([GpuDemand(11.0)] * 7)
    assert rates == [pytest.approx(1 - 0.106 * 0.66)] * 7
    assert TIME_SLICED.throughput(GpuDemand(11.0), 7) == pytest.approx(7 * (1 - 0.106 * 0.66))
    # The H200 main job's 2%: eight lose 1.5% each.
    assert TIME_SLICED.gpu_rates([GpuDemand(2.0)] * 8)[0] == pytest.approx(1 - 0.106 * 0.14)
    # Past 100%, they take turns: 100/110 of the time each, contended 99% of it.
    rate = TIME_SLICED.gpu_rates([GpuDemand(11.0)] * 10)[0]
    assert rate == pytest.approx(100 / 110 * (1 - 0.106 * 0.99))


def test_gpu_filling_trials_keep_what_the_h200_measured_whatever_their_count() -> None:
    # Measured on an H200 (benchmarks/results/sharing-2026-11-26-nvidia-h200.json): 2, 4
    # and 8 GPU-filling processes keep 0.894 of one alone, time-sliced; 1.035 under MPS.
    for n in (2, 4, 8):
        assert TIME_SLICED.throughput(GpuDemand(100.0), n) == pytest.approx(0.894)
        assert MPS.throughput(GpuDemand(100.0), n) == pytest.approx(1.0)
    # A 95% trial leaves 5% idle: two take turns, contended 95% of the time.
    assert TIME_SLICED.throughput(GpuDemand(95.0), 2) == pytest.approx(
        100 / 95 * (1 - 0.106 * 0.95)
    )


def test_mps_overlaps_small_kernels_up_to_its_bound() -> None:
    small = GpuDemand(100.0, sm_share=0.1)  # busy all the time, on a tenth of the SMs
    assert TIME_SLICED.throughput(small, 3) == pytest.approx(0.894)
    # Side by side, bounded at 5.06x the time-sliced aggregate (the H200's 8 small-kernel
    # processes); MPS's own switching cost measured nothing.
    assert MPS.throughput(small, 2) == pytest.approx(2.0)
    assert MPS.throughput(small, 8) == pytest.approx(5.06)
    assert MPS.throughput(small, 10) == pytest.approx(5.06)


def test_what_nvml_reads_on_a_shared_gpu() -> None:
    assert TIME_SLICED.utilization_pct([GpuDemand(11.0)] * 3) == pytest.approx(33.0)
    assert TIME_SLICED.utilization_pct([GpuDemand(60.0)] * 2) == 100.0
    # Overlapping kernels: idle only when none runs.
    overlapped = MPS.utilization_pct([GpuDemand(50.0, sm_share=0.1)] * 2)
    assert overlapped == pytest.approx(100 * (1 - (1 - 0.5) ** 2))


def test_host_cpus_slow_every_trial_of_an_oversubscribed_node() -> None:
    assert cpu_rate(8, [3, 3]) == 1.0
    assert cpu_rate(8, [4, 4, 4]) == pytest.approx(8 / 12)
    assert cpu_rate(8, []) == 1.0


def test_a_fused_group_fills_idle_time_and_idle_sms_before_its_step_grows() -> None:
    seeds = GpuDemand(11.0, sm_share=0.2)  # the seeds' 11% on a fifth of the SMs
    assert TIME_SLICED.fused(seeds, 1).slowdown == 1.0
    # Four members: one wider kernel on 80% of the SMs, the host's 5% a member.
    four = TIME_SLICED.fused(seeds, 4)
    assert four.slowdown == pytest.approx(1.15)
    assert four.demand.sm_share == pytest.approx(0.8)
    assert four.demand.utilization_pct == pytest.approx(11.0)  # not 44%: less than linear
    # Sixteen: the kernels outgrow the SMs (3.2 of them), still under the host's floor.
    sixteen = TIME_SLICED.fused(seeds, 16)
    assert sixteen.slowdown == pytest.approx(1.75)
    assert sixteen.demand.utilization_pct == pytest.approx(100 * 0.11 * 3.2 / 1.75)
    assert 16 / sixteen.slowdown > 9  # aggregate, in solo trials


def test_a_gpu_filling_member_gains_only_the_idle_time_it_leaves() -> None:
    busy = GpuDemand(95.0)
    for members in (2, 4, 8):
        group = TIME_SLICED.fused(busy, members)
        assert group.slowdown == pytest.approx(0.95 * members)
        assert members / group.slowdown == pytest.approx(1 / 0.95)
        assert group.demand.utilization_pct == pytest.approx(100.0)


def test_a_fused_group_that_fills_its_gpu_asks_for_100_percent_at_most() -> None:
    # A group whose kernels fill the step is 100% busy: computed as kernels x 100 / step,
    # some counts came out 1e-14 over, and in real time a group of 8 of the simulated
    # workload at 90% failed every member (a load of its GPU past 100% is refused).
    for members in range(2, 17):
        for util in range(1, 101):
            for sm_share in (0.2, 0.5, 0.9, 1.0):
                group = TIME_SLICED.fused(GpuDemand(float(util), sm_share), members)
                assert 0.0 <= group.demand.utilization_pct <= 100.0


def test_a_fused_group_holds_one_context_and_each_members_own_memory() -> None:
    from hpsearch.simulation import fused_memory_mb

    assert fused_memory_mb(1400.0, 4, context_mb=500.0) == 1400 + 3 * 900
    assert fused_memory_mb(167.0, 8, context_mb=500.0) == 167.0  # the seeds' tiny process
    assert fused_memory_mb(1400.0, 1) == 1400.0
