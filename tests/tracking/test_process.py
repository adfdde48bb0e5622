"""ProcessTracker: a search's MLflow writes made by a process of its own, against a real store.

The store is a SQLite file here (``tracking.writer: process`` takes one as it takes
PostgreSQL, where ``auto`` chooses it; the PostgreSQL searches are in ``tests/cluster``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from hpsearch.storage_faults import Stores, storage_fault
from hpsearch.tracking import (
    PARENT_TAG,
    ProcessTracker,
    RunStatus,
    TrackingWriteError,
)
from tests.conftest import wait_for
from tests.faults.conftest import Mount

pytestmark = pytest.mark.process  # each tracker starts its writer

URI = "sqlite:///mlruns/mlflow.db"


@dataclass(frozen=True)
class _Row:
    metrics: dict[str, float]
    step: int
    time: float


@pytest.fixture
def tracker(seeded_store: Path) -> Iterator[ProcessTracker]:
    opened = ProcessTracker(URI, "test-study", "mlruns/artifacts")
    yield opened
    opened.close()


def _client() -> MlflowClient:
    """A client of this test's store (MLflow keeps one store per URI: a relative one would
    be the first test's)."""
    return MlflowClient(f"sqlite:///{Path('mlruns/mlflow.db').resolve()}")


def _runs(client: MlflowClient, experiment_id: str) -> dict[str, Run]:
    runs = client.search_runs([experiment_id], max_results=1000)
    return {run.info.run_name: run for run in runs}


def test_a_runs_records_reach_the_store_and_its_id_reaches_who_waits(
    tracker: ProcessTracker,
) -> None:
    parent = tracker.start_run("search", params={"study.name": "s"})
    child = tracker.start_run("trial-0", {"x": 0.5}, {"optuna.trial_number": "0"}, parent)
    told: list[str] = []
    tracker.when_created(child, told.append)
    tracker.log_metrics(child, {"score": 1.0}, step=0)
    tracker.log_metrics(child, {"score": 2.0}, step=1)
    rows = [_Row({"gpu_util": 5.0}, 0, 1e9), _Row({"gpu_util": 7.0}, 1, 1e9 + 1)]
    tracker.log_series(child, rows)
    tracker.set_tags(child, {"hpsearch.outcome": "complete", "n": 3})
    tracker.log_text(child, "Traceback ...", "error.txt")
    with tempfile.TemporaryDirectory() as folder:  # gone once the call returns
        (Path(folder) / "front.csv").write_text("trial_number\n0\n")
        tracker.log_file(child, Path(folder) / "front.csv", "pareto")
    tracker.end_run(child, RunStatus.FAILED)

    tracker.flush()  # waits for the writes so far

    assert len(told) == 1
    assert not told[0].startswith("writing-")
    client = _client()
    run = client.get_run(told[0])
    assert run.info.status == "FAILED"
    assert run.data.params == {"x": "0.5"}
    assert run.data.metrics == {"score": 2.0, "gpu_util": 7.0}
    assert [m.value for m in client.get_metric_history(told[0], "score")] == [1.0, 2.0]
    assert run.data.tags["hpsearch.outcome"] == "complete"
    assert run.data.tags["n"] == "3"
    assert run.data.tags[PARENT_TAG] == next(iter(tracker.running_run_ids()))
    assert tracker.runs_of_trial("s", 0) == {}  # tagged with no study: not that study's
    assert Path(client.download_artifacts(told[0], "error.txt")).read_text() == "Traceback ..."
    front = Path(client.download_artifacts(told[0], "pareto/front.csv"))
    assert front.read_text() == "trial_number\n0\n"


def test_a_writer_killed_mid_search_is_replaced_and_nothing_is_lost_or_doubled(
    tracker: ProcessTracker,
) -> None:
    ids = []
    for number in range(6):
        run_id = tracker.start_run(f"trial-{number}", {"x": number})
        tracker.log_metrics(run_id, {"score": float(number)}, step=0)
        ids.append(run_id)
        if number == 2:
            tracker.flush()  # the first three written and acknowledged
            killed = tracker.writer_pid
            os.kill(killed, signal.SIGKILL)
    for run_id in ids:
        tracker.end_run(run_id, RunStatus.FINISHED)
    tracker.flush()

    assert tracker.writer_pid != killed
    runs = _runs(_client(), tracker.experiment_id)
    assert sorted(runs) == [f"trial-{n}" for n in range(6)]  # each once
    for number in range(6):
        run = runs[f"trial-{number}"]
        assert run.info.status == "FINISHED"
        assert run.data.metrics == {"score": float(number)}
        history = _client().get_metric_history(run.info.run_id, "score")
        assert [m.value for m in history] == [float(number)]  # written once


def test_a_full_disk_under_the_writer_is_the_storage_fault_line_in_the_driver(
    tmpfs: Mount,
) -> None:
    tracker = ProcessTracker(URI, "test-study", "mlruns/artifacts")  # a new store, 3 MiB
    run_id = tracker.start_run("trial-0")

    def fill() -> None:
        for number in range(40):  # 256 KiB each: the disk fills on the way
            tracker.log_text(run_id, "x" * 2**18, f"log-{number}.txt")
            tracker.flush()

    with pytest.raises(TrackingWriteError) as raised:
        fill()
    tracker.close()

    line = storage_fault(raised.value, Stores("config.yaml", "sqlite:///optuna.db", URI))
    assert line == (
        "config.yaml: the disk is full under the search's stores; "
        "free some space and run again (what was recorded so far is kept)"
    )


DRIVER = textwrap.dedent(
    """
    import os, signal
    from hpsearch.tracking import ProcessTracker, RunStatus
    tracker = ProcessTracker("sqlite:///mlruns/mlflow.db", "test-study", "mlruns/artifacts")
    print(tracker.writer_pid, flush=True)
    for number in range(20):
        run_id = tracker.start_run(f"trial-{number}", {"x": number})
        tracker.set_tags(run_id, {"hpsearch.outcome": "complete"})
        tracker.end_run(run_id, RunStatus.FINISHED)
    os.kill(os.getpid(), signal.SIGKILL)  # nothing flushed, nothing closed
    """
)


def test_what_a_killed_driver_handed_over_is_written_and_its_writer_ends(
    seeded_store: Path,
) -> None:
    driver = subprocess.run(
        [sys.executable, "-c", DRIVER], capture_output=True, text=True, check=False
    )
    assert driver.returncode == -signal.SIGKILL, driver.stderr[-3000:]
    writer = int(driver.stdout.split()[0])

    def writer_ended() -> bool:
        try:
            os.kill(writer, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie until init reaps it: ended all the same
            stat = Path(f"/proc/{writer}/stat").read_text()
        except FileNotFoundError:
            return True
        return stat.rpartition(")")[2].split()[0] == "Z"

    wait_for(writer_ended, 120, "the orphaned writer's end")
    client = _client()
    experiment = client.get_experiment_by_name("test-study")
    assert experiment is not None
    runs = _runs(client, experiment.experiment_id)
    assert len(runs) == 20
    assert {run.info.status for run in runs.values()} == {"FINISHED"}
