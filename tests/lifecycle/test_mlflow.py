"""The MLflow side of reclaiming a dead driver's trials (real Optuna and MLflow stores)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch import attrs
from hpsearch.config import ObjectiveSpec, RunConfig
from hpsearch.lifecycle import (
    MlflowMirror,
    TrialEnded,
    TrialOpened,
    reclaim_stale_trials,
    record_unwritten_runs,
)
from hpsearch.placement import Admission
from hpsearch.study import GRACE_PERIOD_S, open_study
from hpsearch.tracking import (
    STUDY_TAG,
    TRIAL_NUMBER_TAG,
    MemoryTracker,
    MlflowTracker,
    RunStatus,
)
from hpsearch.trial.protocol import Outcome
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
    # Optuna trial: the run is found by its study and trial-number tags (set as it is
    # created), and its parent with it.
    handle = open_study(config)
    tracker = MlflowTracker(config.tracking.uri, "test-study", "mlruns/artifacts")
    parent = tracker.start_run("the dead driver")
    lost = handle.ask(config.search_space.distributions())
    run_id = tracker.start_run(
        "trial 0",
        tags={TRIAL_NUMBER_TAG: str(lost.number), STUDY_TAG: handle.name},
        parent_run_id=parent,
    )
    # Another study's trial of that number in the experiment (a rerun's), running still.
    beside = tracker.start_run(
        "rerun", tags={TRIAL_NUMBER_TAG: str(lost.number), STUDY_TAG: f"{handle.name}-rerun-0"}
    )
    age_heartbeat(config.study.storage, lost.number, seconds=GRACE_PERIOD_S + 60)

    assert reclaim_stale_trials(handle, tracker) == 1

    assert tracker.client.get_run(run_id).info.status == "KILLED"
    assert tracker.client.get_run(parent).info.status == "KILLED"
    assert tracker.running_run_ids() == {beside}


def test_a_lost_trial_its_driver_never_launched_gets_a_killed_run(
    config: RunConfig, project: Path
) -> None:
    # Killed between asking Optuna for the trial and launching it: no run exists.
    handle = open_study(config)
    tracker = MlflowTracker(config.tracking.uri, "test-study", "mlruns/artifacts")
    lost = handle.ask(config.search_space.distributions())
    age_heartbeat(config.study.storage, lost.number, seconds=GRACE_PERIOD_S + 60)

    assert reclaim_stale_trials(handle, tracker) == 1

    runs = tracker.runs_of_trial(handle.name, lost.number)
    assert list(runs.values()) == ["KILLED"]
    run = tracker.client.get_run(next(iter(runs)))
    assert run.data.params == {k: str(v) for k, v in lost.params.items()}
    assert run.data.tags["hpsearch.state"] == "FAIL"
    # Reclaimed twice (a second driver's start): still one run.
    reclaim_stale_trials(handle, tracker)
    assert len(tracker.runs_of_trial(handle.name, lost.number)) == 1


def test_a_rerun_records_a_never_launched_trial_under_the_dead_searchs_parent_run(
    config: RunConfig, project: Path
) -> None:
    # Killed with one trial running and the next asked for, not yet launched. The rerun
    # reclaims both before its own parent run exists.
    handle = open_study(config)
    tracker = MlflowTracker(config.tracking.uri, "test-study", "mlruns/artifacts")
    parent = tracker.start_run("the dead driver")
    space = config.search_space.distributions()
    running, asked = handle.ask(space), handle.ask(space)
    running.set_user_attr(attrs.MLFLOW_RUN, tracker.start_run("trial 0", parent_run_id=parent))
    for trial in (running, asked):
        age_heartbeat(config.study.storage, trial.number, seconds=GRACE_PERIOD_S + 60)

    assert reclaim_stale_trials(handle, tracker) == 2

    [recorded] = tracker.runs_of_trial(handle.name, asked.number)
    run = tracker.client.get_run(recorded)
    assert run.info.status == "KILLED"
    assert run.data.tags["mlflow.parentRunId"] == parent
    # The experiment still holds one search: no run of the rerun's stands beside it.
    experiment = tracker.client.get_experiment_by_name("test-study")
    assert experiment is not None
    runs = tracker.client.search_runs([experiment.experiment_id])
    assert [r.info.run_id for r in runs if "mlflow.parentRunId" not in r.data.tags] == [parent]


def test_runs_a_stopped_search_could_not_create_are_recorded_from_the_study(
    config: RunConfig, project: Path
) -> None:
    # The search's tracking server stayed out of reach: the parent run exists (it was
    # created before), the trials' runs never were, and the trials are marked.
    handle = open_study(config)
    tracker = MlflowTracker(config.tracking.uri, "test-study", "mlruns/artifacts")
    parent = tracker.start_run("the stopped search")
    space = config.search_space.distributions()
    done, pruned, written = (handle.ask(space) for _ in range(3))
    done.set_user_attr(attrs.METRICS, {"score": 0.75, "loss": 0.5})
    for trial in (done, pruned):
        trial.set_user_attr(attrs.MLFLOW_UNWRITTEN, parent)
    written.set_user_attr(attrs.MLFLOW_RUN, tracker.start_run("trial-2", parent_run_id=parent))
    tracker.end_run(written.user_attrs[attrs.MLFLOW_RUN], RunStatus.FINISHED)
    handle.study.tell(done, 0.75)
    handle.study.tell(pruned, state=TrialState.PRUNED)
    handle.study.tell(written, 0.5)

    assert record_unwritten_runs(handle, tracker) == 2

    trials = open_study(config).study.get_trials(deepcopy=False)  # as a new process reads
    runs = {t.number: tracker.client.get_run(t.user_attrs[attrs.MLFLOW_RUN]) for t in trials}
    assert runs[done.number].data.metrics == {"score": 0.75, "loss": 0.5}
    assert runs[done.number].data.params == {k: str(v) for k, v in done.params.items()}
    assert runs[done.number].data.tags["hpsearch.state"] == "COMPLETE"
    assert runs[pruned.number].data.tags["hpsearch.state"] == "PRUNED"
    assert {r.info.status for r in runs.values()} == {"FINISHED"}
    assert {r.data.tags["mlflow.parentRunId"] for r in runs.values()} == {parent}
    assert tracker.client.get_run(parent).info.status == "KILLED"
    assert record_unwritten_runs(handle, tracker) == 0  # once


def test_an_objectives_user_attrs_tag_its_run_where_mlflow_takes_their_names() -> None:
    tracker = MemoryTracker()
    mirror = MlflowMirror(
        tracker,
        "study",
        tracker.start_run("search"),
        [ObjectiveSpec(metric="v", direction="maximize")],
    )
    trial = optuna.create_study().ask()
    admission = Admission(cpus=1.0, gpus=0.0, reason="test")
    mirror.on_opened(TrialOpened(0, {}, admission, trial, {}))
    user_attrs = {"kind_seen": "a", "best so far": 0.5, "t:1": 1, "a/b": 2}
    refused = {"x!": 1, "a//b": 1, "./x": 1, "/x": 1, "..": 1, ".": 1, "mlflow.note.content": 1}
    ended = TrialEnded(0, Outcome.COMPLETE, (0.5,), {}, {}, {}, admission, 1.0)
    mirror.on_ended(replace(ended, user_attrs={**user_attrs, **refused}))
    [run] = [r for r in tracker.runs.values() if r.name == "trial-0"]
    assert {k: run.tags[k] for k in user_attrs} == {k: str(v) for k, v in user_attrs.items()}
    assert not set(refused) & set(run.tags)  # one refused name would fail the run's batch


def test_a_trials_output_moves_into_its_run_when_it_ends(tmp_path: Path) -> None:
    logs = tmp_path / "workers"
    logs.mkdir()
    tracker = MemoryTracker()
    objectives = [ObjectiveSpec(metric="v", direction="maximize")]
    mirror = MlflowMirror(
        tracker, "study", tracker.start_run("search"), objectives, logs_dir=str(logs)
    )
    admission = Admission(cpus=1.0, gpus=0.0, reason="test")
    study = optuna.create_study()
    for number in (0, 1):
        mirror.on_opened(TrialOpened(number, {}, admission, study.ask(), {}))
    (logs / "trial-0.stdout").write_text("epoch 0: loss 0.5\n")
    (logs / "trial-0.stderr").write_text("a warning\n")
    (logs / "trial-1.stdout").write_text("still running\n")
    mirror.on_ended(TrialEnded(0, Outcome.COMPLETE, (0.5,), {}, {}, {}, admission, 1.0))
    [run] = [r for r in tracker.runs.values() if r.name == "trial-0"]
    assert run.artifacts == {
        "logs/stdout.txt": "epoch 0: loss 0.5\n",
        "logs/stderr.txt": "a warning\n",
    }
    # Moved: the folder keeps only the output of trials still running.
    assert sorted(p.name for p in logs.iterdir()) == ["trial-1.stdout"]
