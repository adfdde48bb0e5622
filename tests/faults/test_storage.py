"""Storage faults: one line naming the store and the fix, exit 2, nothing further damaged.

The faults are the stores', not the runner's: the searches are modelled trials in
simulated time (``--runner simulated``). A store that changes under a search (it
fills, turns read-only, is deleted) is met by a command in a process of its own,
as a user meets it: this process keeps the stores it opened (MLflow caches them).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import hpsearch
from hpsearch.runner import SimulatedRunner
from tests.conftest import (
    CliResult,
    ConfigWriter,
    cli,
    hpsearch_cli,
    load_search,
    merge,
    mlflow_client,
    wait_for,
)
from tests.faults.conftest import Drivers, Mount, study_trials

SIM = ("--runner", "simulated")

SIMULATED = load_search(util=30, memory=500, trials=2, seconds=2)


def _first_search(path: Path) -> None:
    outcome = hpsearch.run(path, runner=SimulatedRunner())
    assert outcome.finished == 2


def _one_line_error(result: CliResult | subprocess.CompletedProcess[str], *expected: str) -> None:
    stderr = result.stderr
    assert result.returncode == 2, stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith("error: "), stderr[-3000:]
    for text in expected:
        assert text in lines[-1]


def test_a_corrupt_study_database_is_one_line_and_left_as_it_is(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config(SIMULATED)
    _first_search(path)
    store = project / "mlruns" / "optuna.db"
    garbage = os.urandom(4096)
    store.write_bytes(garbage)

    for command in (("best", str(path)), ("run", str(path), "--n-trials", "3", *SIM)):
        result = cli(*command)
        _one_line_error(result, "study.storage (sqlite:///mlruns/optuna.db)", "not a SQLite")
        assert len(result.stderr.strip().splitlines()) == 1
        assert store.read_bytes() == garbage  # not "repaired" into an empty study


def test_a_corrupt_mlflow_database_is_one_line_and_the_study_is_kept(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config(SIMULATED)
    _first_search(path)
    before = [(t.number, t.state.name, t.value) for t in study_trials()]
    (project / "mlruns" / "mlflow.db").write_bytes(os.urandom(4096))

    result = cli("run", str(path), "--n-trials", "3", *SIM)

    _one_line_error(result, "tracking.uri (sqlite:///mlruns/mlflow.db)", "not a SQLite")
    assert [(t.number, t.state.name, t.value) for t in study_trials()] == before


@pytest.mark.process  # the tmpfs is mounted by the mount command
def test_a_read_only_store_is_one_line(write_config: ConfigWriter, tmpfs: Mount) -> None:
    path = write_config(SIMULATED, name="disk/config.yaml")
    assert hpsearch_cli("run", "config.yaml", *SIM).returncode == 0
    tmpfs.remount("ro")

    result = hpsearch_cli("run", "config.yaml", "--n-trials", "3", *SIM)

    _one_line_error(result, "study.storage (sqlite:///mlruns/optuna.db)", "read-only")
    assert path.exists()


@pytest.mark.process  # the tmpfs is mounted by the mount command
def test_a_disk_that_fills_mid_run_ends_with_one_line_and_loses_nothing(
    write_config: ConfigWriter, tmpfs: Mount
) -> None:
    # 3 MiB fill up after a few dozen trials' records. The trials running when the
    # disk filled stay RUNNING; the next run reclaims them once their heartbeat runs out.
    search = merge(SIMULATED, {"study": {"n_trials": 300, "heartbeat_grace": 3}})
    write_config(search, name="disk/config.yaml")
    result = hpsearch_cli("run", "config.yaml", *SIM)
    _one_line_error(result, "the disk is full", "free some space")
    assert "Traceback" not in result.stderr, result.stderr[-3000:]  # the one line alone
    done = {t.number: t.value for t in study_trials() if t.state.name == "COMPLETE"}
    assert done

    tmpfs.remount("size=64m")  # space freed: the search goes on from where it was
    again = hpsearch_cli("run", "config.yaml", "--n-trials", str(len(done) + 4), *SIM)
    assert again.returncode == 0, again.stderr[-3000:]
    after = {t.number: t.value for t in study_trials() if t.state.name == "COMPLETE"}
    assert {n: v for n, v in after.items() if n in done} == done  # nothing completed was lost
    assert len(after) >= len(done) + 4


@pytest.mark.process
def test_a_deleted_mlflow_store_is_noticed_and_a_new_history_is_a_choice(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config(SIMULATED)
    _first_search(path)
    before = [(t.number, t.state.name, t.value) for t in study_trials()]
    (project / "mlruns" / "mlflow.db").unlink()

    result = hpsearch_cli("run", str(path), "--n-trials", "3", *SIM)

    _one_line_error(result, "tracking.uri", "is gone", "2 trial(s)", "--new-mlflow-history")
    assert not (project / "mlruns" / "mlflow.db").exists()  # not silently recreated
    trials = study_trials(while_running=False)
    assert [(t.number, t.state.name, t.value) for t in trials] == before
    again = hpsearch_cli("run", str(path), "--n-trials", "3", "--new-mlflow-history", *SIM)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [t.state.name for t in study_trials()] == ["COMPLETE"] * 3


@pytest.mark.process
def test_a_study_store_deleted_mid_search_is_said_and_a_rerun_refuses_to_start_it_afresh(
    write_config: ConfigWriter, project: Path, drivers: Drivers
) -> None:
    # Trials of a few seconds under real Ray: some end, some run, when the file goes.
    path = write_config(
        {
            "train": "tests.train_functions:timed",
            "space": {"sleep": 1.5, "steps": None},
            "study": {"n_trials": 40},
            "execution": {"max_concurrent": 2},
        }
    )
    driver = drivers.start(path)

    def some_ended() -> bool:
        return sum(t.state.name == "COMPLETE" for t in study_trials()) >= 2

    wait_for(some_ended, 240, "two trials to complete", process=driver)
    for suffix in ("", "-wal", "-shm"):
        Path(f"mlruns/optuna.db{suffix}").unlink(missing_ok=True)
    _, stderr = driver.communicate(timeout=120)

    assert driver.returncode == 2, stderr[-3000:]
    line = stderr.strip().splitlines()[-1]
    assert line == (
        f"error: {path}: study.storage (sqlite:///mlruns/optuna.db): its file was deleted (or "
        "replaced) while the search ran; restore it from a backup and run again, or point "
        "the key at "
        "a new file (and, for study.storage, run with --new-study)"
    )
    client = mlflow_client(project)
    experiment = client.get_experiment_by_name("test-study")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    statuses = {r.info.status for r in runs}
    assert "RUNNING" not in statuses, statuses  # every run ended
    assert "KILLED" in statuses  # those the fault interrupted

    # A rerun finds the MLflow runs of trials its new, empty study does not have.
    rerun = hpsearch_cli("run", str(path), "--n-trials", "1")
    assert rerun.returncode == 2, rerun.stderr[-3000:]
    assert rerun.stderr.strip().splitlines()[-1] == (
        f"error: {path}: study.storage: study 'test-study' has no trials in "
        "sqlite:///mlruns/optuna.db, but the MLflow store sqlite:///mlruns/mlflow.db holds "
        "runs of its trials from an earlier search (the study's file deleted or replaced?); "
        "restore the study's file, or run again with --new-study to start the study afresh "
        "beside those runs"
    )
    afresh = hpsearch_cli("run", str(path), "--n-trials", "1", "--new-study")
    assert afresh.returncode == 0, afresh.stderr[-3000:]
    assert [t.state.name for t in study_trials()] == ["COMPLETE"]


@pytest.mark.process  # a writer process, for one of them
@pytest.mark.parametrize("writer", ["process", "driver"])
def test_a_tracking_database_that_refuses_the_connection_is_one_line(
    write_config: ConfigWriter, writer: str
) -> None:
    refused = "postgresql+psycopg://postgres@127.0.0.1:1/runs"  # nothing listens on port 1
    path = write_config(merge(SIMULATED, {"tracking": {"uri": refused, "writer": writer}}))

    result = hpsearch_cli("run", str(path), *SIM)

    _one_line_error(result, f"{path}: tracking.uri: MLflow store '{refused}' cannot be used")
    assert "Connection refused" in result.stderr
    assert result.stderr.strip().endswith("check the URI, and that its server is running")
    assert "Traceback" not in result.stderr
