"""Simulated GPUs: a load model driven by the running trials, a trace replayed row by row.

The contract every backend honours, simulated or not, is tested in
``tests/telemetry/test_backends.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch.simulation import LoadModelBackend, TraceBackend
from hpsearch.telemetry import GpuInfo, GpuLoad, GpuSample, TraceWriter, TrialLoad

LAPTOP = GpuInfo(0, "Simulated RTX 4050 Laptop GPU", 6141.0, 115.0)


def test_load_model_sums_the_running_trials() -> None:
    backend = LoadModelBackend([LAPTOP, GpuInfo(1, LAPTOP.name, 6141.0, 115.0)], idle_power_w=5.0)
    idle = backend.sample(0.0)[0]
    assert idle.utilization_pct == 0.0
    assert idle.power_w == pytest.approx(5.0)
    backend.set_load(1, TrialLoad(GpuLoad(60.0, 2000.0), 11, (0,)))
    backend.set_load(2, TrialLoad(GpuLoad(70.0, 1500.0), 12, (0,)))
    backend.set_load(3, TrialLoad(GpuLoad(10.0, 300.0), 13, (1,)))
    gpu0, gpu1 = backend.sample(1.0)
    assert gpu0.utilization_pct == 100.0  # capped: two trials time-slice one GPU
    assert gpu0.memory_used_mb == 3500.0
    assert gpu0.power_w == pytest.approx(115.0)
    assert gpu0.process_memory_mb(12) == 1500.0
    assert gpu1.utilization_pct == 10.0
    assert gpu1.power_w == pytest.approx(5.0 + 110.0 * 0.1)
    backend.clear_load(2)
    assert backend.sample(2.0)[0].utilization_pct == 60.0


def test_trace_replays_row_by_row_and_loops(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    rows = [
        GpuSample(time=float(t), index=i, name=f"gpu{i}", utilization_pct=float(10 * t + i))
        for t in range(3)
        for i in range(2)
    ]
    with path.open("w") as stream:
        stream.write("# a comment line\n")
        TraceWriter(stream).write(rows)
    backend = TraceBackend(path)
    assert [g.name for g in backend.gpus()] == ["gpu0", "gpu1"]
    seen = [[s.utilization_pct for s in backend.sample(100.0 + k)] for k in range(4)]
    assert seen == [[0.0, 1.0], [10.0, 11.0], [20.0, 21.0], [0.0, 1.0]]
