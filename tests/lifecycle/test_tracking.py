"""Opening a search's tracker: its study's store and its MLflow store are checked to agree
(real Optuna and MLflow stores, SQLite)."""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna
import pytest

from hpsearch import attrs
from hpsearch.config import RunConfig
from hpsearch.errors import ConfigError
from hpsearch.lifecycle import Afresh, open_tracker
from hpsearch.study import open_study
from hpsearch.tracking import STUDY_TAG, TRIAL_NUMBER_TAG, MlflowTracker


def _run_of_trial_0(tracker: MlflowTracker) -> None:
    tracker.start_run("trial 0", tags={TRIAL_NUMBER_TAG: "0", STUDY_TAG: "test-study"})


@pytest.mark.usefixtures("seeded_store")
def test_runs_of_a_study_whose_file_is_gone_stop_the_search_with_the_fix(
    config: RunConfig, mlflow_tracker: MlflowTracker
) -> None:
    _run_of_trial_0(mlflow_tracker)  # an earlier search's; its study's file is new

    with pytest.raises(ConfigError, match=r"study 'test-study' has no trials in .* --new-study"):
        open_tracker(config, open_study(config), print, Afresh())


@pytest.mark.usefixtures("seeded_store")
def test_a_driver_beside_it_that_starts_the_study_between_its_two_reads_is_no_lost_study(
    config: RunConfig, mlflow_tracker: MlflowTracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two drivers started at once on fresh stores: this one read the study empty, and
    # before it looked for runs of trial 0, the other asked trial 0 and opened its run.
    handle, beside = open_study(config), open_study(config)
    read_runs = MlflowTracker.runs_of_trial

    def meanwhile(tracker: MlflowTracker, study: str, number: int) -> dict[str, str]:
        beside.ask(config.search_space.distributions())
        _run_of_trial_0(mlflow_tracker)
        return read_runs(tracker, study, number)

    monkeypatch.setattr(MlflowTracker, "runs_of_trial", meanwhile)

    open_tracker(config, handle, print, Afresh())  # no error: nothing of the study is gone

    assert [t.number for t in handle.study.get_trials(deepcopy=False)] == [0]


def test_a_driver_beside_it_that_makes_the_mlflow_store_between_its_reads_is_no_lost_store(
    config: RunConfig, project: Path, mlflow_store_template: Path
) -> None:
    # This driver found no MLflow store's file; before it read the study, the driver
    # beside it made the store and recorded trial 0's run there.
    handle = open_study(config)
    store = project / "mlruns" / "mlflow.db"
    assert not store.exists()
    read_trials = handle.study.get_trials

    def meanwhile(*args: object, **kwargs: object) -> list[optuna.trial.FrozenTrial]:
        if not store.exists():
            shutil.copyfile(mlflow_store_template, store)
            trial = handle.ask(config.search_space.distributions())
            trial.set_user_attr(attrs.MLFLOW_RUN, "a-run-of-the-other-driver")
        return read_trials(*args, **kwargs)  # type: ignore[arg-type]

    handle.study.get_trials = meanwhile  # type: ignore[method-assign]

    open_tracker(config, handle, print, Afresh())  # no error: the store is there
