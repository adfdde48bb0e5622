"""The four parts a user brings (docs/guides/extending.md): the examples of
``examples/extending/``, as the guide shows them, passed to ``hpsearch.run``."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import hpsearch
from hpsearch.config import RunConfig, load_config
from hpsearch.errors import ConfigError
from hpsearch.runner import SimulatedRunner
from tests.conftest import REPO_ROOT, mlflow_client

FOLDER = REPO_ROOT / "examples" / "extending"

pytestmark = pytest.mark.usefixtures("seeded_store")


@pytest.fixture
def example() -> Iterator[ModuleType]:
    """``examples/extending/`` importable as its ``run.py`` imports it (its own folder)."""
    sys.path.insert(0, str(FOLDER))
    try:
        yield importlib.import_module("ended_lines")
    finally:
        sys.path.remove(str(FOLDER))


def _config(trials: int = 12) -> RunConfig:
    config = load_config(FOLDER / "search.yaml")
    return config.with_overrides(n_trials=trials)


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


def test_a_listener_is_told_each_trials_end(example: ModuleType, project: Path) -> None:
    ended = project / "ended.jsonl"
    outcome = hpsearch.run(
        _config(), runner=SimulatedRunner(), listeners=[example.EndedLines(ended)]
    )
    lines = [json.loads(line) for line in ended.read_text().splitlines()]
    assert sorted(line["trial"] for line in lines) == list(range(12))
    assert {line["outcome"] for line in lines} == {"complete"}
    best = max(lines, key=lambda line: line["values"][0])
    assert best["trial"] == outcome.results.best_trial.number


def test_a_policy_decides_each_trials_resources(example: ModuleType, project: Path) -> None:
    policy = _module("two_at_most").TwoAtMost()
    outcome = hpsearch.run(_config(), runner=SimulatedRunner(), policy=policy)
    assert outcome.mlflow_experiment_id is not None
    runs = mlflow_client(project).search_runs(
        [outcome.mlflow_experiment_id], "tags.`optuna.trial_number` != ''", max_results=100
    )
    assert len(runs) == 12
    # One simulated GPU, and a whole GPU each: never two at once, each one said why.
    assert {run.data.tags["hpsearch.gpus"] for run in runs} == {"1.0"}
    assert {run.data.tags["hpsearch.policy"] for run in runs} == {"two at most (1 of 2)"}


def test_a_tracker_records_the_runs_in_place_of_mlflow(example: ModuleType, project: Path) -> None:
    log = project / "runs.log"
    tracker = _module("run_log").RunLog(log)
    hpsearch.run(_config(), runner=SimulatedRunner(), tracker=tracker)
    lines = log.read_text().splitlines()
    trials = [line for line in lines if line.startswith("trial-")]
    assert len(trials) == 12
    assert all(" FINISHED " in line and "val_accuracy=" in line for line in trials)
    assert len(lines) == 13  # and the search's parent run
    assert not (project / "mlruns" / "artifacts").exists()  # MLflow wrote nothing


def test_a_runner_refuses_what_it_cannot_run_and_runs_the_rest(
    example: ModuleType, project: Path
) -> None:
    budgeted = _module("budgeted").Budgeted(most=20)
    with pytest.raises(ConfigError) as refused:
        hpsearch.run(_config(trials=30), runner=budgeted)
    assert str(refused.value).endswith(
        "study.n_trials: this runner runs at most 20 trials, the study asks 30; "
        "set study.n_trials to 20 or less"
    )
    assert not (project / "mlruns" / "optuna.db").exists()  # refused before anything opened
    assert hpsearch.run(_config(), runner=budgeted).finished == 12
