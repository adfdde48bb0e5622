"""The suite's order for its workers: the longest tests first, so that none starts last.

``make test`` hands the tests to its workers one at a time, in collection order
(``--dist load --maxschedchunk 1``): a worker that finishes a test takes the next.
Sorted longest first, that is longest-processing-time-first scheduling, and the
workers' last tests are short ones. Handed out in chunks instead (xdist's default),
or in the files' order, a half-minute test that mostly waits (a timeout, an outage)
could start last and leave the other workers, and the cores, idle to its end.

Three groups run one after the other, each longest first: the tests that start
processes but not the worker's shared Ray (those that stop it, ``no_ray``,
among them), then those that search on that Ray (``ray_one_gpu``), then the
ones that start no process. So each worker starts its shared Ray about once, not
again after every test that stopped it; and the quick tests come last.

The lengths are the ones a full run recorded, in ``tests/durations.json``
(``make durations`` records them again). They only order the tests: a test that is
not recorded counts as the median recorded test of its kind (one that starts a
process, or one that does not), so a new test is neither lost nor misplaced far.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Set
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parent / "durations.json"
"""Seconds each test took in a recorded full run, by node id."""


def read_durations(path: Path = DURATIONS) -> dict[str, float]:
    """The recorded seconds by node id; none where nothing was recorded yet."""
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except FileNotFoundError:
        return {}


def longest_first(
    items: list[pytest.Item],
    durations: Mapping[str, float],
    starts_process: Set[str],
    uses_shared_ray: Set[str] = frozenset(),
) -> list[pytest.Item]:
    """``items`` in their three groups (see the module), each sorted by recorded length,
    longest first (ties keep their order).

    Args:
        durations: recorded seconds by node id.
        starts_process: node ids of the tests that start a process (their kind).
        uses_shared_ray: node ids of the tests that search on the worker's shared Ray.
    """

    def median(ids: Iterable[str]) -> float:
        known = [durations[i] for i in ids if i in durations]
        return statistics.median(known) if known else 0.0

    ids = [item.nodeid for item in items]
    unknown = {
        True: median(i for i in ids if i in starts_process),
        False: median(i for i in ids if i not in starts_process),
    }

    def length(item: pytest.Item) -> float:
        recorded = durations.get(item.nodeid)
        return recorded if recorded is not None else unknown[item.nodeid in starts_process]

    def group(item: pytest.Item) -> int:
        if item.nodeid not in starts_process:
            return 2
        return 1 if item.nodeid in uses_shared_ray else 0

    return sorted(items, key=lambda item: (group(item), -length(item)))


class DurationRecorder:
    """Adds up each test's setup, call and teardown seconds as the run reports them, and
    writes them into ``path`` when the run ends, over what it held for those tests (only
    after a run in which every test passed: a failed one may have stopped early). A run
    of some tests updates theirs and keeps the others'."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._seconds: dict[str, float] = {}
        self._failed = False

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._seconds[report.nodeid] = self._seconds.get(report.nodeid, 0.0) + report.duration
        self._failed = self._failed or report.failed

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self._failed or exitstatus != 0 or not self._seconds:
            return
        merged = {**read_durations(self._path), **self._seconds}
        rounded = {k: round(v, 2) for k, v in sorted(merged.items())}
        self._path.write_text(json.dumps(rounded, indent=0) + "\n")
