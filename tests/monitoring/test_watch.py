"""``hpsearch monitor`` on one clock: its samples are taken and paced by the clock it is given."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from hpsearch.monitoring import watch
from hpsearch.simulation import ConstantBackend
from hpsearch.telemetry import GpuInfo, read_trace

GPUS = [GpuInfo(0, "Simulated RTX 4050 Laptop GPU", 6141.0, 115.0)]


class Clock:
    """A virtual clock: sleeping moves it on at once."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.slept = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


def test_an_hour_of_monitoring_on_a_virtual_clock_samples_every_second_of_it(
    tmp_path: Path,
) -> None:
    clock = Clock()
    backend = ConstantBackend(GPUS, utilization_pct=11.0, memory_used_mb=167.0)
    csv = tmp_path / "hour.csv"
    console = Console(file=io.StringIO(), width=200)

    result = watch(
        backend, duration_s=3600, interval_s=1.0, csv_path=csv, console=console, clock=clock
    )

    samples = read_trace(csv)
    assert result.samples == len(samples) == 3600
    assert [s.time - samples[0].time for s in samples[:3]] == [0.0, 1.0, 2.0]
    assert samples[-1].time - samples[0].time == 3599.0
    assert result.wall_s == clock.slept == 3599.0  # from the first sample to the last
    assert "3600 samples per GPU over 3599.0 s" in result.report
    assert "very low" in result.report  # 11% of a GPU: the seeds' verdict
    # Without a terminal, a line per GPU every few seconds of the clock, not of the run.
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert 600 <= len(lines) <= 800
