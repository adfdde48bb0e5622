"""Per-trial GPU series and summaries cut from the monitor's samples (load model, fake clock)."""

from __future__ import annotations

import pytest

from hpsearch.runner import VirtualClock as Clock
from hpsearch.simulation import LoadModelBackend, SharingModel
from hpsearch.telemetry import (
    ClusterGpuMetrics,
    ClusterReadings,
    GpuDemand,
    GpuInfo,
    GpuLoad,
    GpuMonitor,
    TrialGpuMetrics,
    TrialLoad,
    objective_reading,
    solo_metrics,
)

GPUS = [GpuInfo(0, "sim", 6141.0, 115.0), GpuInfo(1, "sim", 6141.0, 115.0)]

SHARING = SharingModel()
"""The sharing model's defaults (the root passes the simulated GPUs' own)."""


@pytest.fixture
def model() -> LoadModelBackend:
    """Simulated GPUs showing the loads trials declare."""
    return LoadModelBackend(GPUS, idle_power_w=5.0)


@pytest.fixture
def monitor(model: LoadModelBackend, clock: Clock) -> GpuMonitor:
    """A monitor sampled by hand (no thread) at the virtual clock's times."""
    return GpuMonitor(model, interval_s=1.0, clock=clock)


def _tick(monitor: GpuMonitor, clock: Clock, seconds: int) -> None:
    for _ in range(seconds):
        clock.now += 1.0
        monitor.sample_now()


def test_two_trials_sharing_a_gpu(
    model: LoadModelBackend, monitor: GpuMonitor, clock: Clock
) -> None:
    gpu = TrialGpuMetrics(monitor, load_sink=model, sharing=SHARING)
    assert gpu.placed(0, gpu_ids=["0"], pid=100, started_at=clock.now) == ""
    gpu.declared_load(0, GpuLoad(30.0, 1000.0))
    _tick(monitor, clock, 2)
    gpu.placed(1, gpu_ids=["0"], pid=101, started_at=clock.now)
    gpu.declared_load(1, GpuLoad(40.0, 500.0))
    _tick(monitor, clock, 3)

    points = gpu.new_points(0)
    assert [p.step for p in points] == [0, 1, 2, 3, 4]
    assert [p.metrics["system/gpu_0_utilization_percentage"] for p in points] == [
        30,
        30,
        70,
        70,
        70,
    ]
    assert [p.metrics["system/gpu_0_trials_sharing"] for p in points] == [1, 1, 2, 2, 2]
    assert {p.metrics["system/gpu_0_process_memory_megabytes"] for p in points} == {1000.0}
    assert points[-1].metrics["system/gpu_0_memory_usage_megabytes"] == 1500.0
    assert gpu.new_points(0) == [], "each sample is handed out once"

    _tick(monitor, clock, 1)
    last, report = gpu.finish(0, clock.now)
    assert [p.step for p in last] == [5]
    assert report is not None
    assert report.metrics["gpu_utilization_mean_pct"] == pytest.approx((30 * 2 + 70 * 4) / 6)
    assert report.metrics["gpu_memory_peak_mb"] == 1500.0
    assert report.metrics["gpu_process_memory_peak_mb"] == 1000.0
    assert report.metrics["gpu_trials_sharing_max"] == 2
    assert report.tags["hpsearch.gpu_index"] == "0"
    assert report.tags["hpsearch.gpu_co_tenants"] == "1"
    assert report.attrs["declared_load"] == {"utilization_pct": 30.0, "memory_mb": 1000.0}

    # Trial 0's load is gone from the simulated GPU; trial 1 is alone now.
    _tick(monitor, clock, 1)
    assert gpu.new_points(1)[-1].metrics["system/gpu_0_utilization_percentage"] == 40.0
    assert gpu.new_points(1)[-1:] == []
    _, report1 = gpu.finish(1, clock.now)
    assert report1 is not None
    assert report1.tags["hpsearch.gpu_co_tenants"] == "0"
    assert gpu.tracked() == []


def test_a_trial_on_each_gpu_is_not_a_co_tenant(
    model: LoadModelBackend, monitor: GpuMonitor, clock: Clock
) -> None:
    gpu = TrialGpuMetrics(monitor, load_sink=model, sharing=SHARING)
    gpu.placed(0, gpu_ids=["0"], pid=1, started_at=clock.now)
    gpu.placed(1, gpu_ids=["1"], pid=2, started_at=clock.now)
    _tick(monitor, clock, 2)
    _, report = gpu.finish(0, clock.now)
    assert report is not None
    assert report.tags["hpsearch.gpu_co_tenants"] == "none"
    assert report.metrics["gpu_trials_sharing_max"] == 1


def test_a_multi_gpu_trial_gets_a_series_per_gpu(
    model: LoadModelBackend, monitor: GpuMonitor, clock: Clock
) -> None:
    gpu = TrialGpuMetrics(monitor, load_sink=model, sharing=SHARING)
    gpu.placed(0, gpu_ids=["0", "1"], pid=1, started_at=clock.now)
    gpu.declared_load(0, GpuLoad(50.0, 800.0))
    _tick(monitor, clock, 2)
    (first, _) = gpu.new_points(0)
    assert first.metrics["system/gpu_0_utilization_percentage"] == 50.0
    assert first.metrics["system/gpu_1_utilization_percentage"] == 50.0
    _, report = gpu.finish(0, clock.now)
    assert report is not None
    assert report.tags["hpsearch.gpu_index"] == "0,1"
    assert "gpu1_memory_peak_mb" in report.metrics


def test_a_trial_shorter_than_the_interval_still_gets_one_reading(
    model: LoadModelBackend, monitor: GpuMonitor, clock: Clock
) -> None:
    gpu = TrialGpuMetrics(monitor, load_sink=model, sharing=SHARING)
    gpu.placed(0, gpu_ids=["0"], pid=1, started_at=clock.now)
    gpu.declared_load(0, GpuLoad(20.0, 300.0))
    ended = clock.now + 0.3
    clock.now += 0.31  # the driver learns of the end a moment after it
    points, report = gpu.finish(0, ended)
    assert len(points) == 1
    assert report is not None
    assert report.metrics["gpu_utilization_mean_pct"] == 20.0


def test_trials_whose_gpus_are_not_sampled_say_why(
    model: LoadModelBackend, monitor: GpuMonitor, clock: Clock
) -> None:
    gpu = ClusterGpuMetrics(
        ClusterReadings("driver-node", monitor), local_sink=model, sharing=SHARING
    )
    other = gpu.placed(0, gpu_ids=["0"], node_id="worker-node", pid=1, started_at=clock.now)
    assert other == "not sampled: no GPU monitor reads Ray node worker-node"
    unknown = gpu.placed(1, gpu_ids=["7"], node_id="driver-node", pid=1, started_at=clock.now)
    assert "GPU(s) 7 are not among the monitored GPUs" in unknown
    assert gpu.placed(2, gpu_ids=[], node_id=None, pid=1, started_at=clock.now) == ""
    assert gpu.finish(0, clock.now) == ([], None)


def test_each_trials_series_comes_from_the_node_it_ran_on(clock: Clock) -> None:
    gpus = [GpuInfo(0, "Simulated", 6141.0, 115.0)]
    here, there = LoadModelBackend(gpus), LoadModelBackend(gpus)
    local = GpuMonitor(here, interval_s=1.0, clock=clock)
    remote = GpuMonitor(there, interval_s=1.0, clock=clock)  # another node's, streamed here
    readings = ClusterReadings("driver-node", local)
    readings.add("worker-node", remote, sink=there)
    gpu = ClusterGpuMetrics(readings, local_sink=here, sharing=SHARING)
    assert readings.monitored() == {"worker-node": {0: 6141.0}, "driver-node": {0: 6141.0}}

    gpu.placed(0, gpu_ids=["0"], node_id="driver-node", pid=1, started_at=clock.now)
    gpu.placed(1, gpu_ids=["0"], node_id="worker-node", pid=2, started_at=clock.now)
    gpu.declared_load(0, GpuLoad(20.0, 300.0))
    gpu.declared_load(1, GpuLoad(70.0, 900.0))  # reaches the worker node's load model only
    for _ in range(3):
        clock.now += 1.0
        local.sample_now()
        remote.sample_now()

    seen = {
        n: {p.metrics["system/gpu_0_utilization_percentage"] for p in gpu.new_points(n)}
        for n in (0, 1)
    }
    assert seen == {0: {20.0}, 1: {70.0}}
    # Both sit on "GPU 0", of different nodes: neither is the other's co-tenant.
    _, report = gpu.finish(1, clock.now)
    assert report is not None
    assert report.attrs["co_tenants"] == []
    # A node whose monitor is lost is read no more.
    readings.drop("worker-node")
    lost = gpu.placed(2, gpu_ids=["0"], node_id="worker-node", pid=3, started_at=clock.now)
    assert lost.startswith("not sampled")
    assert "worker-node" not in readings.monitored()


# -- a trial's share of its solo speed ------------------------------------------------


def test_a_fused_groups_members_are_one_process_on_their_gpu(
    model: LoadModelBackend, monitor: GpuMonitor, clock: Clock
) -> None:
    # Trials 0 and 1: members of one fused group (one worker, pid 100; the first
    # declares the group's load); trial 2: a process of its own.
    gpu = TrialGpuMetrics(monitor, load_sink=model, sharing=SHARING)
    start = clock.now
    for number, pid in ((0, 100), (1, 100), (2, 200)):
        gpu.placed(number, gpu_ids=["0"], pid=pid, started_at=start)
    gpu.declared_load(0, GpuLoad(60.0, 1500.0))
    gpu.declared_load(2, GpuLoad(60.0, 500.0))
    _tick(monitor, clock, 4)

    assert {p.metrics["system/gpu_0_trials_sharing"] for p in gpu.new_points(1)} == {2}
    # Both members run at the share of two 60% processes, not of three trials.
    two = SharingModel().gpu_rates([GpuDemand(60.0)] * 2)[0]
    assert gpu.speed_share(1, start, clock.now) == pytest.approx(two)
    assert gpu.speed_share(0, start, clock.now) == pytest.approx(two)
    # The member that declared the group's load leaves; the group runs on, its load too.
    gpu.finish(0, clock.now)
    _tick(monitor, clock, 1)
    assert gpu.new_points(2)[-1].metrics["system/gpu_0_memory_usage_megabytes"] == 2000.0
    _, report = gpu.finish(1, clock.now)
    assert report is not None
    assert report.tags["hpsearch.gpu_co_tenants"] == "2"  # not its fellow member
    assert report.metrics["gpu_trials_sharing_max"] == 2
    _tick(monitor, clock, 1)  # and with the group's last member, the load is gone
    assert gpu.new_points(2)[-1].metrics["system/gpu_0_memory_usage_megabytes"] == 500.0


def test_a_shared_trial_runs_at_the_sharing_models_share_of_its_solo_speed(
    model: LoadModelBackend, monitor: GpuMonitor, clock: Clock
) -> None:
    gpu = TrialGpuMetrics(monitor, load_sink=model, sharing=SHARING)
    start = clock.now
    gpu.placed(0, gpu_ids=["0"], pid=1, started_at=start)
    gpu.declared_load(0, GpuLoad(60.0, 500.0))
    _tick(monitor, clock, 10)
    gpu.placed(1, gpu_ids=["0"], pid=2, started_at=clock.now)
    gpu.declared_load(1, GpuLoad(60.0, 500.0))
    _tick(monitor, clock, 10)

    # Two 60% trials ask 120% of a time-sliced GPU: 100/120 of solo speed, less the
    # switch (10.6%), paid the 60% of the time the other keeps the GPU busy.
    both = SharingModel().gpu_rates([GpuDemand(60.0)] * 2)[0]
    assert both == pytest.approx(100 / 120 * (1 - 0.106 * 0.6))
    assert gpu.speed_share(0, start, start + 10) == pytest.approx(1.0)
    assert gpu.speed_share(0, start + 10, start + 20) == pytest.approx(both)
    # Over both halves: the time-weighted mean, what a rate over 20 s measures.
    assert gpu.speed_share(0, start, start + 20) == pytest.approx((1.0 + both) / 2)
    # A trial on the other GPU, or one never placed, is not slowed by these.
    gpu.placed(2, gpu_ids=["1"], pid=3, started_at=clock.now)
    _tick(monitor, clock, 2)
    assert gpu.speed_share(2, clock.now - 2, clock.now) == pytest.approx(1.0)
    assert gpu.speed_share(9, start, clock.now) is None


def test_without_declared_loads_the_readings_tell_the_share(
    model: LoadModelBackend, monitor: GpuMonitor, clock: Clock
) -> None:
    # Real GPUs declare nothing: the share comes from the readings. The model shows
    # the loads (set directly), the trials' records do not know them.
    gpu = TrialGpuMetrics(monitor, sharing=SHARING)
    start = clock.now
    gpu.placed(0, gpu_ids=["0"], pid=1, started_at=start)
    model.set_load(0, TrialLoad(GpuLoad(20.0, 500.0), 1, (0,)))
    gpu.placed(1, gpu_ids=["0"], pid=2, started_at=start)
    model.set_load(1, TrialLoad(GpuLoad(20.0, 500.0), 2, (0,)))
    _tick(monitor, clock, 5)
    # Not busy (40%): the reading is the demand; only the switching cost slows them,
    # paid the 20% of the time the other keeps the GPU busy.
    alone_cost = 1 - 0.106 * 0.2
    assert gpu.speed_share(0, start, clock.now) == pytest.approx(alone_cost)

    model.clear_load(1)
    gpu.finish(1, clock.now)
    model.set_load(0, TrialLoad(GpuLoad(70.0, 500.0), 1, (0,)))
    alone = clock.now
    _tick(monitor, clock, 5)  # trial 0 alone: 70% is its solo utilisation
    gpu.placed(2, gpu_ids=["0"], pid=3, started_at=clock.now)
    model.set_load(2, TrialLoad(GpuLoad(70.0, 500.0), 3, (0,)))
    shared = clock.now
    _tick(monitor, clock, 5)
    assert gpu.speed_share(0, alone, shared) == pytest.approx(1.0)
    # Busy (100%): the reading hides demand. Trial 0's own solo 70%, and for trial
    # 2 (never alone) the mean per trial of the readings that were not busy:
    # five samples at 20% each (two trials at 40%), five at 70% (trial 0 alone).
    typical = (5 * 20.0 + 5 * 70.0) / 10
    expected = SharingModel().gpu_rates([GpuDemand((70.0 + typical) / 2)] * 2)[0]
    assert gpu.speed_share(0, shared, clock.now) == pytest.approx(expected)
    assert expected < alone_cost  # slower than the switching cost alone says


def test_speed_metrics_get_solo_twins_and_objectives_read_them() -> None:
    metrics = {"samples_per_sec": 500.0, "step_time_ms": 8.0, "val_accuracy": 0.9}
    twins = solo_metrics(metrics, 0.5)
    # A rate doubles, a duration halves; other metrics have no twin.
    assert twins == {"samples_per_sec_solo": 1000.0, "step_time_ms_solo": 4.0}
    assert objective_reading({**metrics, **twins}, "samples_per_sec") == 1000.0
    assert objective_reading(metrics, "samples_per_sec") == 500.0  # no twin: as measured
    assert objective_reading({**metrics, **twins}, "val_accuracy") == 0.9
