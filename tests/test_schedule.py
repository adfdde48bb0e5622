"""The suite's order: three groups, each longest first, an unrecorded test at its kind's median."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from tests.schedule import DurationRecorder, longest_first, read_durations


@dataclass
class _Item:
    nodeid: str


def _order(
    ids: list[str], durations: dict[str, float], processes: set[str], on_ray: set[str]
) -> list[str]:
    items = cast(list[pytest.Item], [_Item(i) for i in ids])
    return [item.nodeid for item in longest_first(items, durations, processes, on_ray)]


def test_processes_first_then_the_shared_rays_then_the_quick_ones_each_longest_first() -> None:
    durations = {"unit_a": 0.1, "unit_b": 0.5, "ray_a": 5.0, "ray_b": 30.0, "proc_a": 2.0,
                 "proc_b": 20.0}  # fmt: skip
    order = _order(
        ["unit_a", "ray_a", "proc_a", "unit_b", "ray_b", "proc_b"],
        durations,
        processes={"ray_a", "ray_b", "proc_a", "proc_b"},
        on_ray={"ray_a", "ray_b"},
    )
    assert order == ["proc_b", "proc_a", "ray_b", "ray_a", "unit_b", "unit_a"]


def test_a_test_not_recorded_counts_as_the_median_of_its_kind() -> None:
    durations = {"proc_a": 30.0, "proc_b": 10.0, "proc_c": 1.0, "unit_a": 0.2}
    order = _order(
        ["proc_a", "proc_b", "proc_c", "proc_new", "unit_a", "unit_new"],
        durations,
        processes={"proc_a", "proc_b", "proc_c", "proc_new"},
        on_ray=set(),
    )
    # The new process test at 10 s, after proc_b (ties keep their order).
    assert order == ["proc_a", "proc_b", "proc_new", "proc_c", "unit_a", "unit_new"]


def test_a_recorded_run_updates_its_tests_and_keeps_the_others(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    path.write_text('{"kept": 3.0, "updated": 9.0}')
    recorder = DurationRecorder(path)
    for phase, seconds in (("setup", 0.5), ("call", 1.0), ("teardown", 0.25)):
        recorder.pytest_runtest_logreport(
            cast(pytest.TestReport, _Report("updated", seconds, failed=False, when=phase))
        )
    recorder.pytest_sessionfinish(cast(pytest.Session, None), exitstatus=0)
    assert read_durations(path) == {"kept": 3.0, "updated": 1.75}


def test_a_run_with_a_failure_records_nothing(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    recorder = DurationRecorder(path)
    report = _Report("broke", 2.0, failed=True, when="call")
    recorder.pytest_runtest_logreport(cast(pytest.TestReport, report))
    recorder.pytest_sessionfinish(cast(pytest.Session, None), exitstatus=1)
    assert read_durations(path) == {}


@dataclass
class _Report:
    nodeid: str
    duration: float
    failed: bool
    when: str
