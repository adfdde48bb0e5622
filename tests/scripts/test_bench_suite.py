"""The suite's speed benchmark reads pytest's summary and judges each run as its target says."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import bench_suite  # noqa: E402 - scripts/ is not a package


def _run(target: str, wall_s: float, exit_code: int = 0, **counts: int) -> dict[str, Any]:
    return {"target": target, "wall_s": wall_s, "exit_code": exit_code, **counts}


def test_pytests_last_summary_line_gives_its_seconds_and_counts() -> None:
    output = (
        "==== 3 passed in 1.00s ====\n"  # an earlier session's line, as a nested run prints
        "SKIPPED [1] tests/test_gpu.py:50: needs an NVIDIA GPU\n"
        "================= 2 failed, 1110 passed, 6 skipped, 1 error in 606.06s (0:10:06) "
        "==================\n"
        "make: *** [Makefile:83: test] Error 1\n"
    )
    assert bench_suite.pytest_summary(output) == {
        "pytest_s": 606.06,
        "failed": 2,
        "passed": 1110,
        "skipped": 6,
        "errors": 1,
    }
    # make check's pytest -q writes it bare.
    assert bench_suite.pytest_summary(
        "........ [100%]\n965 passed, 6 skipped in 61.52s (0:01:01)\n"
    ) == {
        "pytest_s": 61.52,
        "passed": 965,
        "skipped": 6,
    }
    assert bench_suite.pytest_summary("error: no tests ran in this folder\n") == {}


def test_a_run_meets_its_target_only_within_the_bound_and_with_every_test_passed() -> None:
    def met(run: dict[str, Any]) -> bool:
        verdict: bool = bench_suite.judged(run)[bench_suite.verdict_key(run["target"])]
        return verdict

    assert bench_suite.TARGET_S == {"test": 480.0, "check": 90.0}  # 8 min and 90 s

    assert met(_run("test", 479.9, passed=1112))
    assert not met(_run("test", 480.1, passed=1112))
    assert not met(_run("test", 400.0, exit_code=2, passed=1111, failed=1))  # fast, but failed
    assert not met(_run("test", 400.0, exit_code=0, passed=1111, errors=1))
    assert met(_run("check", 89.0, passed=965))
    assert not met(_run("check", 91.0, passed=965))


def test_the_days_file_keeps_earlier_runs_and_counts_the_verdicts_over_all() -> None:
    first = bench_suite.merged(None, [_run("test", 600.0, passed=1112)], "2026-11-30")
    first["note"] = "what a person added"
    second = bench_suite.merged(
        first, [_run("test", 470.0, passed=1112), _run("check", 70.0, passed=965)], "2026-11-30"
    )
    assert list(second["results"]) == ["test-1", "test-2", "check-1"]
    assert second["results"]["test-1"] == first["results"]["test-1"]  # kept as judged then
    assert (second["targets_passed"], second["targets"]) == (2, 3)
    assert second["missed"] == ["test-1: 600 s, exit 0"]
    assert second["summary"]["test"] == {
        "runs": 2,
        "passed": 2,
        "met": 1,
        "fastest_s": 470.0,
        "slowest_s": 600.0,
    }
    # A failed run counts, but its time is not among those that passed.
    third = bench_suite.merged(second, [_run("test", 300.0, 2, failed=1)], "2026-11-30")
    assert third["summary"]["test"] == {
        **second["summary"]["test"],
        "runs": 3,
        "last_three_s": [600.0, 470.0, 300.0],
        "last_three_within": False,  # one too slow, one failed
    }
    fast = [_run("test", 450.0 + n, passed=1112) for n in range(3)]
    assert bench_suite.merged(third, fast, "2026-11-30")["summary"]["test"]["last_three_within"]
    assert bench_suite.merged(third, [], "2026-11-30") == third  # summed up again: the same
    assert second["summary"]["check"]["met"] == 1
    assert second["note"] == "what a person added"
