"""The MLflow side of reclaiming a dead driver's trials (real Optuna and MLflow stores)."""

from __future__ import annotations

from pathlib import Path

import pytest
from optuna.trial import TrialState

from hpsearch import attrs
from hpsearch.config import RunConfig
from hpsearch.lifecycle import reclaim_stale_trials
from hpsearch.study import GRACE_PERIOD_S, open_study
from hpsearch.tracking import TRIAL_NUMBER_TAG, MlflowTracker
from tests.conftest import age_heartbeat

pytestmark = pytest.mark.usefixtures("seeded_store")


def test_runs_a_dead_driver_left_running_are_ended_as_their_trials_ended(
    config: RunConfig, project: Path
) -> None:
    handle = open_study(config)
    tracker = MlflowTracker(config.tracking.uri, "test-study", "mlruns/artifacts")
    parent = tracker.start_run("the dead driver")
    space = config.search_space.distributions()
    told, lost = handle.ask(space), handle.ask(space)
    for trial in (told, lost):
        run_id = tracker.start_run(f"trial {trial.number}", parent_run_id=parent)
        trial.set_user_attr(attrs.MLFLOW_RUN, run_id)
    # Killed after starting a trial's run, before naming it on the Optuna trial.
    unnamed = tracker.start_run("trial 2", parent_run_id=parent)
    # Killed between telling Optuna and ending the run: COMPLETE there, RUNNING here.
    handle.study.tell(told, 1.0)
    age_heartbeat(config.study.storage, lost.number, seconds=GRACE_PERIOD_S + 60)

    assert reclaim_stale_trials(handle, tracker) == 1

    status = {
        n: tracker.client.get_run(t.user_attrs[attrs.MLFLOW_RUN]).info.status
        for n, t in ((t.number, t) for t in handle.study.get_trials(deepcopy=False))
        if attrs.MLFLOW_RUN in t.user_attrs and t.state != TrialState.WAITING
    }
    assert status == {told.number: "FINISHED", lost.number: "KILLED"}
    assert tracker.client.get_run(parent).info.status == "KILLED"
    assert tracker.client.get_run(unnamed).info.status == "KILLED"
    assert tracker.running_run_ids() == set()


def test_a_lost_trial_not_yet_named_on_its_run_still_gets_its_run_ended(
    config: RunConfig, project: Path
) -> None:
    # The driver was killed between starting the trial's run and naming it on the
    # Optuna trial: the run is found by its trial-number tag, and its parent with it.
    handle = open_study(config)
    tracker = MlflowTracker(config.tracking.uri, "test-study", "mlruns/artifacts")
    parent = tracker.start_run("the dead driver")
    lost = handle.ask(config.search_space.distributions())
    run_id = tracker.start_run(
        "trial 0", tags={TRIAL_NUMBER_TAG: str(lost.number)}, parent_run_id=parent
    )
    age_heartbeat(config.study.storage, lost.number, seconds=GRACE_PERIOD_S + 60)

    assert reclaim_stale_trials(handle, tracker) == 1

    assert tracker.client.get_run(run_id).info.status == "KILLED"
    assert tracker.client.get_run(parent).info.status == "KILLED"
    assert tracker.running_run_ids() == set()


def test_a_lost_trial_its_driver_never_launched_gets_a_killed_run(
    config: RunConfig, project: Path
) -> None:
    # Killed between asking Optuna for the trial and launching it: no run exists.
    handle = open_study(config)
    tracker = MlflowTracker(config.tracking.uri, "test-study", "mlruns/artifacts")
    lost = handle.ask(config.search_space.distributions())
    age_heartbeat(config.study.storage, lost.number, seconds=GRACE_PERIOD_S + 60)

    assert reclaim_stale_trials(handle, tracker) == 1

    runs = tracker.runs_of_trial(lost.number)
    assert list(runs.values()) == ["KILLED"]
    run = tracker.client.get_run(next(iter(runs)))
    assert run.data.params == {k: str(v) for k, v in lost.params.items()}
    assert run.data.tags["hpsearch.state"] == "FAIL"
    # Reclaimed twice (a second driver's start): still one run.
    reclaim_stale_trials(handle, tracker)
    assert len(tracker.runs_of_trial(lost.number)) == 1
