"""Two drivers on one study in PostgreSQL, tracked by an MLflow server; one is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
import sqlalchemy.exc
from mlflow.tracking import MlflowClient
from optuna.storages import RetryHeartbeatStaleTrialCallback

from hpsearch.attrs import MLFLOW_RUN
from hpsearch.tracking import TRIAL_NUMBER_TAG
from tests.cluster.conftest import MlflowServer, Postgres
from tests.conftest import ConfigWriter, wait_for
from tests.faults.conftest import Drivers

pytestmark = pytest.mark.process

N_TRIALS = 8
TRIAL_S = 3.0  # long enough that the killed driver is still in one when it dies
GRACE_S = 10  # study.heartbeat_grace: the killed driver's trial is reclaimed after this


def test_two_drivers_share_a_postgresql_study_and_a_killed_ones_trials_run_again(
    write_config: ConfigWriter,
    project: Path,
    drivers: Drivers,
    postgres: Postgres,
    mlflow_server: MlflowServer,
) -> None:
    storage = postgres.create_database("optuna")
    gate = project / "gate"
    name = f"shared-{os.getpid()}-{time.monotonic_ns()}"  # one MLflow server per session
    path = write_config(
        {
            "study": {
                "name": name,
                "storage": storage,
                "n_trials": N_TRIALS,
                "heartbeat_grace": GRACE_S,
            },
            "tracking": {"uri": mlflow_server.uri},
            "train": "tests.train_functions:timed",
            # Trials from the third on hold at the gate until the kill: on a slow machine
            # one driver could otherwise spend the budget before the other ran a trial.
            "space": {"sleep": TRIAL_S, "steps": None, "gate": str(gate), "hold_from": 2},
            "execution": {"max_concurrent": 1},
        }
    )
    # Both start at once on an empty database: one creates Optuna's tables.
    doomed, survivor = drivers.start(path), drivers.start(path)

    def trials() -> list[optuna.trial.FrozenTrial]:
        try:
            return optuna.load_study(study_name=name, storage=storage).trials
        except KeyError:  # not created yet
            return []
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            # The drivers are creating Optuna's tables, and this read's own CREATE TYPE
            # (or TABLE) ran beside theirs: "duplicate key", "already exists".
            return []

    def both_running_after_a_completed_one() -> bool:
        for driver in (doomed, survivor):
            if driver.poll() is not None:  # said at once, with why, not after the wait
                raise AssertionError(f"a driver ended first: {driver.communicate()[1][-3000:]}")
        found = trials()
        states = Counter(t.state.name for t in found)
        # Launched: a trial killed before its launch is covered in tests/lifecycle.
        launched = [t for t in found if t.state.name == "RUNNING" and MLFLOW_RUN in t.user_attrs]
        return states["COMPLETE"] >= 2 and len(launched) == 2

    wait_for(both_running_after_a_completed_one, 240, "two completed trials and two launched")
    os.kill(doomed.pid, signal.SIGKILL)  # the driver only, as `kill -9 PID` would
    doomed.communicate()
    gate.touch()
    out, stderr = survivor.communicate(timeout=GRACE_S + 180)

    assert survivor.returncode == 0, stderr[-3000:]
    assert "View run" not in out  # MLflow's line for every run it ends on a server
    found = trials()
    done = [t for t in found if t.state.name == "COMPLETE"]
    # Together they stop at the budget, the killed driver's work included.
    assert len(done) == N_TRIALS
    assert not [t for t in found if t.state.name in {"RUNNING", "WAITING"}]
    # The killed driver's running trial was failed as stale and run again by the other.
    lost = [t for t in found if t.state.name == "FAIL"]
    assert 1 <= len(lost) <= 2
    retried = {RetryHeartbeatStaleTrialCallback.retried_trial_number(t): t for t in done}
    for trial in lost:
        assert retried[trial.number].params == trial.params
    # No configuration ran twice but those retries.
    xs = [t.params["x"] for t in done]
    assert len(set(xs)) == len(xs)

    # Every trial has exactly one MLflow child run on the server; none is left RUNNING.
    client = MlflowClient(mlflow_server.uri)
    experiment = client.get_experiment_by_name(name)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    children = Counter(
        int(r.data.tags[TRIAL_NUMBER_TAG]) for r in runs if TRIAL_NUMBER_TAG in r.data.tags
    )
    assert children == Counter(t.number for t in found)
    assert not [r for r in runs if r.info.status == "RUNNING"]
    assert experiment.artifact_location.startswith("mlflow-artifacts:")

    # `hpsearch best` agrees with Optuna.
    best = subprocess.run(
        [sys.executable, "-m", "hpsearch", "best", str(path), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    reported = json.loads(best.stdout)
    expected = optuna.load_study(study_name=name, storage=storage).best_trial
    assert reported["trial_number"] == expected.number
    assert reported["values"] == {"score": pytest.approx(expected.value)}
    run = client.get_run(reported["mlflow_run_id"])
    assert run.data.tags[TRIAL_NUMBER_TAG] == str(expected.number)
