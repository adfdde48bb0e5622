"""The monitor's sampling thread, its history and windows, against simulated backends."""

from __future__ import annotations

import time

import pytest

from hpsearch.telemetry import (
    ConstantBackend,
    GpuInfo,
    GpuMonitor,
    GpuSample,
    TelemetryBackend,
)

GPUS = [GpuInfo(0, "a", 1000.0, 100.0), GpuInfo(1, "b", 1000.0, 100.0)]


class FlakyBackend(TelemetryBackend):
    """Raises on every other call, as a buggy backend might."""

    kind = "flaky"

    def __init__(self) -> None:
        self.calls = 0

    def gpus(self) -> list[GpuInfo]:
        return GPUS[:1]

    def sample(self, now: float) -> list[GpuSample]:
        self.calls += 1
        if self.calls % 2:
            raise RuntimeError("driver hiccup")
        return [GpuSample(time=now, index=0, name="a", utilization_pct=5.0)]


def _wait_for(condition: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)


def test_samples_every_gpu_in_the_background() -> None:
    with GpuMonitor(ConstantBackend(GPUS, utilization_pct=30.0), interval_s=0.02) as monitor:
        _wait_for(lambda: monitor.samples_taken >= 10)
    taken = monitor.samples_taken
    assert taken >= 10
    assert len(monitor.history(0)) == taken
    assert len(monitor.history(1)) == taken
    time.sleep(0.1)
    assert monitor.samples_taken == taken, "stopped means stopped"
    summary = monitor.summary(1, since=0.0)
    assert summary is not None
    assert summary.utilization is not None
    assert summary.utilization.mean == 30.0
    assert monitor.sampler_cpu_s >= 0.0
    assert monitor.wall_s > 0.0


def test_history_since_and_the_rolling_window() -> None:
    now = [100.0]
    monitor = GpuMonitor(
        ConstantBackend(GPUS[:1]), interval_s=1.0, window_s=3.0, clock=lambda: now[0]
    )
    for t in range(10):
        now[0] = 100.0 + t
        monitor.sample_now()
    assert [s.time for s in monitor.history(0, since=106.0)] == [107.0, 108.0, 109.0]
    summary = monitor.summary(0)  # the last 3 s by default
    assert summary is not None
    assert summary.samples == 3
    assert monitor.summary(0, since=200.0) is None
    assert monitor.history(5) == []


def test_history_is_bounded() -> None:
    monitor = GpuMonitor(ConstantBackend(GPUS[:1]), interval_s=1.0, window_s=5.0, history_s=10.0)
    for _ in range(100):
        monitor.sample_now()
    assert len(monitor.history(0)) == 11


def test_a_failing_backend_does_not_end_the_monitor(caplog: pytest.LogCaptureFixture) -> None:
    backend = FlakyBackend()
    with GpuMonitor(backend, interval_s=0.01) as monitor:
        _wait_for(lambda: len(monitor.history(0)) >= 3)
    assert len(monitor.history(0)) >= 3
    assert "GPU sampling failed" in caplog.text


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        GpuMonitor(ConstantBackend(GPUS), interval_s=0)
