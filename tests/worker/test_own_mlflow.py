"""A trial's own MLflow calls: in the search's store and experiment, nested under the
trial's run, with no ``./mlflow.db`` of their own; the code's own choices win."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from hpsearch.tracking import PARENT_TAG, STUDY_TAG, TRIAL_NUMBER_TAG, MlflowTracker
from hpsearch.trial.protocol import Assignment, Outcome, TrialTracking
from hpsearch.trial.script import CommandSpec
from hpsearch.worker import execute_trial
from tests.harness import make_launch

HERE = Assignment(cpus=1.0, gpu_ids=(), node_id="node", pid=7)
MLFLOW_ENV = ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID")


class Search:
    """A search's MLflow store with trial 3's run open, as the driver leaves it."""

    def __init__(self, project: Path, template: Path) -> None:
        store = project / "mlruns" / "mlflow.db"
        store.parent.mkdir()
        shutil.copyfile(template, store)
        self.uri = f"sqlite:///{store}"
        tracker = MlflowTracker(self.uri, "exp", str(project / "mlruns" / "artifacts"))
        parent = tracker.start_run("search")
        tags = {STUDY_TAG: "study", TRIAL_NUMBER_TAG: "3"}
        self.trial_run = tracker.start_run("trial-3", tags=tags, parent_run_id=parent)
        tracker.flush()
        self.client = MlflowClient(self.uri)
        self.tracking = TrialTracking(uri=self.uri, experiment="exp", study="study")

    def run(self, params: dict[str, Any], **launch: Any) -> Outcome:
        launch.setdefault("train", "tests.train_functions:logs_to_mlflow")
        built = make_launch(params, number=3, tracking=self.tracking, **launch)
        outcome = execute_trial(built, assigned=HERE, send=lambda _: None).outcome
        assert outcome is not None
        return outcome

    def own_runs(self, experiment: str = "exp") -> list[Run]:
        """The runs of ``experiment`` that hpsearch did not open."""
        found = self.client.get_experiment_by_name(experiment)
        assert found is not None, experiment
        runs = self.client.search_runs([found.experiment_id])
        return [r for r in runs if r.info.run_name not in {"search", "trial-3"}]


@pytest.fixture
def search(project: Path, mlflow_store_template: Path) -> Iterator[Search]:
    for name in MLFLOW_ENV:
        assert name not in os.environ, name  # the test's own environment: MLflow's defaults
    yield Search(project, mlflow_store_template)
    import mlflow.tracking.fluent

    # The code's mlflow.set_experiment, kept by the test process as by a worker.
    mlflow.tracking.fluent._active_experiment_id = None


def test_calls_with_no_run_land_in_a_run_nested_under_the_trials(
    search: Search, project: Path
) -> None:
    assert search.run({"x": 0.25}) is Outcome.COMPLETE
    [run] = search.own_runs()
    assert run.data.tags[PARENT_TAG] == search.trial_run
    assert run.data.tags["hpsearch.trial"] == "3"
    assert run.data.params == {"user_param": "7"}
    assert run.data.metrics == {"user_loss": 0.25}
    assert run.info.status == "FINISHED"  # ended with the trial: no run left open
    # Not MLflow's default store in the working directory (two trials starting at once
    # raced to create it, and one failed), and nothing of the trial left behind.
    assert not (project / "mlflow.db").exists()
    assert [name for name in MLFLOW_ENV if name in os.environ] == []
    import mlflow

    assert mlflow.active_run() is None


def _end_metrics(search: Search, params: dict[str, Any]) -> dict[str, float]:
    train = "tests.train_functions:logs_to_mlflow"
    launch = make_launch(params, number=3, tracking=search.tracking, train=train)
    end = execute_trial(launch, assigned=HERE, send=lambda _: None)
    assert end.outcome is Outcome.COMPLETE
    return end.metrics


def test_an_objective_logged_only_to_mlflow_is_the_trials_final_metric(search: Search) -> None:
    assert _end_metrics(search, {"x": 0.25, "silent": True}) == {"score": 0.75}  # the last


def test_an_objective_logged_to_the_codes_own_experiment_is_not_the_trials(
    search: Search,
) -> None:
    assert _end_metrics(search, {"x": 0.25, "silent": True, "experiment": "mine"}) == {}


def test_a_failed_trials_run_ends_failed(search: Search) -> None:
    assert search.run({"x": 0.5, "fail": True}) is Outcome.FAIL
    [run] = search.own_runs()
    assert run.info.status == "FAILED"


def test_the_codes_own_experiment_is_kept_and_only_names_the_trial(search: Search) -> None:
    assert search.run({"x": 0.5, "experiment": "mine"}) is Outcome.COMPLETE
    assert search.own_runs() == []
    [run] = search.own_runs("mine")  # in the search's store, not in ./mlflow.db
    assert PARENT_TAG not in run.data.tags  # its parent would be in another experiment
    assert run.data.tags["hpsearch.trial"] == "3"
    assert run.info.status == "FINISHED"


def test_the_users_own_tracking_uri_is_kept(
    search: Search, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = f"sqlite:///{project / 'theirs.db'}"
    shutil.copyfile(Path(search.uri.removeprefix("sqlite:///")), project / "theirs.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", theirs)
    assert search.run({"x": 0.5}) is Outcome.COMPLETE
    assert search.own_runs() == []
    client = MlflowClient(theirs)
    [run] = [r for r in client.search_runs(["0"])]  # MLflow's Default experiment there
    assert PARENT_TAG not in run.data.tags
    assert os.environ["MLFLOW_TRACKING_URI"] == theirs


@pytest.mark.process  # a script of its own
def test_a_commands_script_logs_under_the_trials_run_too(search: Search, project: Path) -> None:
    script = project / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, sys
            import mlflow
            mlflow.log_metric("script_loss", float(sys.argv[1]))
            print(json.dumps({"step": 0, "score": float(sys.argv[1])}))
            """
        )
    )
    command = CommandSpec(command=[sys.executable, str(script), "{x}"])
    outcome = search.run(
        {"x": 0.75}, train="", command=command, workdir=str(project), trial_dir=str(project / "t")
    )
    assert outcome is Outcome.COMPLETE
    [run] = search.own_runs()
    assert run.data.tags[PARENT_TAG] == search.trial_run
    assert run.data.metrics == {"script_loss": 0.75}
    assert run.info.status == "FINISHED"  # MLflow ended it as the script exited
