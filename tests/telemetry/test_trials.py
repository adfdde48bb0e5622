"""Per-trial GPU series and summaries cut from the monitor's samples (load model, fake clock)."""

from __future__ import annotations

import pytest

from hpsearch.runner import VirtualClock as Clock
from hpsearch.telemetry import GpuInfo, GpuMonitor, LoadModelBackend, TrialGpuMetrics

GPUS = [GpuInfo(0, "sim", 6141.0, 115.0), GpuInfo(1, "sim", 6141.0, 115.0)]


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
    gpu = TrialGpuMetrics(monitor, local_node_id="node-a", load_sink=model)
    assert gpu.placed(0, gpu_ids=["0"], node_id="node-a", pid=100, started_at=clock.now) == ""
    gpu.declared_load(0, 30.0, 1000.0)
    _tick(monitor, clock, 2)
    gpu.placed(1, gpu_ids=["0"], node_id="node-a", pid=101, started_at=clock.now)
    gpu.declared_load(1, 40.0, 500.0)
    _tick(monitor, clock, 3)

    points = gpu.new_points(0)
    assert [p.step for p in points] == [0, 1, 2, 3, 4]
    assert [p.metrics["gpu_utilization_pct"] for p in points] == [30, 30, 70, 70, 70]
    assert [p.metrics["gpu_trials_sharing"] for p in points] == [1, 1, 2, 2, 2]
    assert {p.metrics["gpu_process_memory_mb"] for p in points} == {1000.0}
    assert points[-1].metrics["gpu_memory_used_mb"] == 1500.0
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
    assert gpu.new_points(1)[-1].metrics["gpu_utilization_pct"] == 40.0
    assert gpu.new_points(1)[-1:] == []
    _, report1 = gpu.finish(1, clock.now)
    assert report1 is not None
    assert report1.tags["hpsearch.gpu_co_tenants"] == "0"
    assert gpu.tracked() == []


def test_a_trial_on_each_gpu_is_not_a_co_tenant(
    model: LoadModelBackend, monitor: GpuMonitor, clock: Clock
) -> None:
    gpu = TrialGpuMetrics(monitor, load_sink=model)
    gpu.placed(0, gpu_ids=["0"], node_id=None, pid=1, started_at=clock.now)
    gpu.placed(1, gpu_ids=["1"], node_id=None, pid=2, started_at=clock.now)
    _tick(monitor, clock, 2)
    _, report = gpu.finish(0, clock.now)
    assert report is not None
    assert report.tags["hpsearch.gpu_co_tenants"] == "none"
    assert report.metrics["gpu_trials_sharing_max"] == 1


def test_a_multi_gpu_trial_gets_a_series_per_gpu(
    model: LoadModelBackend, monitor: GpuMonitor, clock: Clock
) -> None:
    gpu = TrialGpuMetrics(monitor, load_sink=model)
    gpu.placed(0, gpu_ids=["0", "1"], node_id=None, pid=1, started_at=clock.now)
    gpu.declared_load(0, 50.0, 800.0)
    _tick(monitor, clock, 2)
    (first, _) = gpu.new_points(0)
    assert first.metrics["gpu0_utilization_pct"] == 50.0
    assert first.metrics["gpu1_utilization_pct"] == 50.0
    _, report = gpu.finish(0, clock.now)
    assert report is not None
    assert report.tags["hpsearch.gpu_index"] == "0,1"
    assert "gpu1_memory_peak_mb" in report.metrics


def test_a_trial_shorter_than_the_interval_still_gets_one_reading(
    model: LoadModelBackend, monitor: GpuMonitor, clock: Clock
) -> None:
    gpu = TrialGpuMetrics(monitor, load_sink=model)
    gpu.placed(0, gpu_ids=["0"], node_id=None, pid=1, started_at=clock.now)
    gpu.declared_load(0, 20.0, 300.0)
    ended = clock.now + 0.3
    clock.now += 0.31  # the driver learns of the end a moment after it
    points, report = gpu.finish(0, ended)
    assert len(points) == 1
    assert report is not None
    assert report.metrics["gpu_utilization_mean_pct"] == 20.0


def test_trials_whose_gpus_are_not_sampled_say_why(
    model: LoadModelBackend, monitor: GpuMonitor, clock: Clock
) -> None:
    gpu = TrialGpuMetrics(monitor, local_node_id="driver-node", load_sink=model)
    other = gpu.placed(0, gpu_ids=["0"], node_id="worker-node", pid=1, started_at=clock.now)
    assert "ran on Ray node worker-node" in other
    unknown = gpu.placed(1, gpu_ids=["7"], node_id="driver-node", pid=1, started_at=clock.now)
    assert "GPU(s) 7 are not among the monitored GPUs" in unknown
    assert gpu.placed(2, gpu_ids=[], node_id=None, pid=1, started_at=clock.now) == ""
    assert gpu.tracked() == []
    assert gpu.finish(0, clock.now) == ([], None)
