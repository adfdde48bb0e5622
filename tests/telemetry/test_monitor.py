"""The monitor's sampling thread, its history and windows, against simulated backends."""

from __future__ import annotations

import threading

import pytest

from hpsearch.simulation import ConstantBackend
from hpsearch.telemetry import GpuInfo, GpuMonitor, GpuSample, TelemetryBackend

GPUS = [GpuInfo(0, "a", 1000.0, 100.0), GpuInfo(1, "b", 1000.0, 100.0)]


class FlakyBackend(TelemetryBackend):
    """Raises on every other call, as a buggy backend might; says when ``calls`` were made."""

    kind = "flaky"

    def __init__(self, calls: int) -> None:
        self.calls = 0
        self.enough = threading.Event()
        self._wanted = calls

    def gpus(self) -> list[GpuInfo]:
        return GPUS[:1]

    def sample(self, now: float) -> list[GpuSample]:
        self.calls += 1
        if self.calls >= self._wanted:
            self.enough.set()
        if self.calls % 2:
            raise RuntimeError("driver hiccup")
        return [GpuSample(time=now, index=0, name="a", utilization_pct=5.0)]


class CountingBackend(ConstantBackend):
    """Constant readings that take some CPU each, and say when ``calls`` samples were taken."""

    def __init__(self, calls: int) -> None:
        super().__init__(GPUS, utilization_pct=30.0)
        self.calls = 0
        self.enough = threading.Event()
        self._wanted = calls

    def sample(self, now: float) -> list[GpuSample]:
        sum(i * i for i in range(20_000))  # a reading costs the sampler CPU time
        self.calls += 1
        if self.calls >= self._wanted:
            self.enough.set()
        return super().sample(now)


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "hpsearch-gpu-monitor"]


def test_samples_every_gpu_in_the_background() -> None:
    backend = CountingBackend(calls=10)
    with GpuMonitor(backend, interval_s=0.01) as monitor:
        assert backend.enough.wait(timeout=10), "the thread takes samples on its own"
        assert len(_sampler_threads()) == 1
    assert not _sampler_threads(), "stopped means stopped: the thread has ended"
    taken = monitor.samples_taken
    assert taken == backend.calls >= 10
    assert len(monitor.history(0)) == taken
    assert len(monitor.history(1)) == taken
    summary = monitor.summary(1, since=0.0)
    assert summary is not None
    assert summary.utilization is not None
    assert summary.utilization.mean == 30.0
    # The sampler's own CPU time is measured (its level is a benchmark: bench_monitor.py).
    assert 0.0 < monitor.sampler_cpu_s <= monitor.wall_s


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
    backend = FlakyBackend(calls=6)
    with GpuMonitor(backend, interval_s=0.01) as monitor:
        assert backend.enough.wait(timeout=10)
    assert len(monitor.history(0)) >= 3  # every other call failed; the others were kept
    assert "GPU sampling failed" in caplog.text


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        GpuMonitor(ConstantBackend(GPUS), interval_s=0)
