"""A simulated GPU's pace for real-time trials: the driver's file, a worker's reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch.runner import VirtualClock
from hpsearch.simulation import LoadModelBackend, PacePublisher, PaceReader, SharingModel
from hpsearch.telemetry import GpuDemand, GpuInfo, GpuLoad, TrialLoad


def test_workers_read_the_pace_the_load_model_gives_them(tmp_path: Path) -> None:
    model = LoadModelBackend([GpuInfo(0, "sim", 8000.0), GpuInfo(1, "sim", 8000.0)])
    path = tmp_path / "pace.json"
    publisher = PacePublisher(model, path)
    clock = VirtualClock(0.0)
    first, second = PaceReader(str(path), 0, clock), PaceReader(str(path), 1, clock)
    assert first.share() == 1.0  # nothing declared yet: solo speed

    publisher.set_load(0, TrialLoad(GpuLoad(60.0, 500.0), None, (0,)))
    publisher.set_load(1, TrialLoad(GpuLoad(60.0, 500.0), None, (0,)))
    publisher.set_load(2, TrialLoad(GpuLoad(60.0, 500.0), None, (1,)))  # alone on GPU 1
    both = SharingModel().gpu_rates([GpuDemand(60.0)] * 2)[0]
    clock.now += 1.0
    assert first.share() == pytest.approx(both)
    assert second.share() == pytest.approx(both)
    assert PaceReader(str(path), 2, clock).share() == 1.0

    publisher.clear_load(1)
    assert first.share() == pytest.approx(both)  # read again only after a moment
    clock.now += 1.0
    assert first.share() == 1.0
    publisher.close()
    assert not path.exists()


def test_trials_that_want_more_cpus_than_the_node_has_slow_in_proportion(
    tmp_path: Path,
) -> None:
    model = LoadModelBackend([GpuInfo(0, "sim", 8000.0), GpuInfo(1, "sim", 8000.0)])
    path = tmp_path / "pace.json"
    publisher = PacePublisher(model, path, cores=8.0)
    clock = VirtualClock(0.0)
    reader = PaceReader(str(path), 0, clock)
    publisher.set_load(0, TrialLoad(GpuLoad(10.0, 500.0, cpus=4.0), None, (0,)))
    publisher.set_load(1, TrialLoad(GpuLoad(10.0, 500.0, cpus=4.0), None, (1,)))
    assert reader.share() == 1.0  # 8 CPUs wanted, 8 there: each GPU alone, no slowdown
    publisher.set_load(2, TrialLoad(GpuLoad(10.0, 500.0, cpus=8.0), None, (1,)))
    clock.now += 1.0
    assert reader.share() == pytest.approx(8.0 / 16.0)  # 16 CPUs wanted of 8
    assert publisher.speed_shares()[0] == pytest.approx(0.5)


def test_a_worker_that_cannot_read_the_pace_runs_at_solo_speed(tmp_path: Path) -> None:
    garbled = tmp_path / "pace.json"
    garbled.write_text("{not json")
    assert PaceReader(str(garbled), 0).share() == 1.0
    assert PaceReader(str(tmp_path / "missing.json"), 0).share() == 1.0
