"""A search's records: its parent run ends with the status the search earned, and a
study that already reached its budget runs nothing (real Optuna study, real MLflow)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from optuna.trial import TrialState, create_trial

from hpsearch.config import RunConfig
from hpsearch.errors import HpsearchError
from hpsearch.lifecycle import Afresh, ParentRun, SearchEnd, SearchRecords
from hpsearch.tracking import MemoryTracker, MlflowTracker
from tests.conftest import mlflow_client


def _records(config: RunConfig, tracker: MlflowTracker, said: list[str]) -> SearchRecords:
    return SearchRecords.open(config, said.append, Afresh(), tracker)


def _status(run_id: str) -> str:
    return str(mlflow_client(Path.cwd()).get_run(run_id).info.status)  # the project's store


def test_a_search_that_ran_ends_its_parent_run_finished_and_says_what_it_did(
    config: RunConfig, mlflow_tracker: MlflowTracker
) -> None:
    said: list[str] = []
    records = _records(config, mlflow_tracker, said)
    assert records.nothing_to_do() is None
    seen: list[ParentRun] = []

    def search(parent: ParentRun) -> SearchEnd:
        seen.append(parent)
        return SearchEnd(finished=3, interrupted=0, elapsed_s=1.5, timed_out=False, overdue=False)

    outcome = records.run(search)

    assert outcome.mlflow_parent_run_id == seen[0].run_id
    assert (outcome.finished, outcome.elapsed_s) == (3, 1.5)
    assert outcome.short_of == config.study.n_trials  # no trial reached the study
    assert _status(seen[0].run_id) == "FINISHED"
    assert said == []


@pytest.mark.parametrize(
    ("ending", "status"),
    [
        (SearchEnd(1, interrupted=2, elapsed_s=1.0, timed_out=False, overdue=False), "KILLED"),
        (KeyboardInterrupt(), "KILLED"),
        (RuntimeError("the runner broke"), "FAILED"),
    ],
)
def test_the_parent_run_ends_killed_or_failed_as_the_search_did(
    config: RunConfig,
    mlflow_tracker: MlflowTracker,
    ending: SearchEnd | BaseException,
    status: str,
) -> None:
    records = _records(config, mlflow_tracker, [])
    seen: list[ParentRun] = []

    def search(parent: ParentRun) -> SearchEnd:
        seen.append(parent)
        if isinstance(ending, BaseException):
            raise ending
        return ending

    if isinstance(ending, BaseException):
        with pytest.raises(type(ending)):
            records.run(search)
    else:
        records.run(search)
    assert _status(seen[0].run_id) == status


def test_a_study_at_its_budget_runs_nothing_and_says_how_to_run_more(
    config: RunConfig, mlflow_tracker: MlflowTracker
) -> None:
    said: list[str] = []
    records = _records(config, mlflow_tracker, said)
    n_trials = config.study.n_trials
    assert n_trials is not None
    for value in range(n_trials):
        records.handle.study.add_trial(create_trial(state=TrialState.COMPLETE, value=value))
    records = _records(config, mlflow_tracker, said)  # the count is read when opened

    outcome = records.nothing_to_do()

    assert outcome is not None
    assert outcome.mlflow_parent_run_id is None
    assert said == [
        f"study 'test-study' already has {n_trials} finished trials "
        f"(study.n_trials is {n_trials}): nothing to do; "
        "raise study.n_trials or pass --n-trials to run more"
    ]


class _GatedTracker(MemoryTracker):
    """Opening the records waits on it until the caller's block lets it go on."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def running_run_ids(self) -> set[str]:
        if not self.gate.wait(timeout=10):
            raise AssertionError("the records opened on the caller's thread, before its block")
        return super().running_run_ids()


def test_records_open_on_their_own_thread_while_the_callers_block_goes_on(
    config: RunConfig,
) -> None:
    tracker = _GatedTracker()
    with SearchRecords.opening(config, print, Afresh(), tracker) as opening:
        assert opening.has_work  # the caller starts its runner
        tracker.gate.set()  # the caller's block runs (its Ray starts) while they open
        records = opening.records()
    assert records.tracker is tracker
    assert records.nothing_to_do() is None


def test_a_study_at_its_budget_opens_its_records_at_once_and_has_no_work(
    config: RunConfig,
) -> None:
    n_trials = config.study.n_trials
    assert n_trials is not None
    handle = SearchRecords.open(config, print, Afresh(), MemoryTracker()).handle
    for value in range(n_trials):
        handle.study.add_trial(create_trial(state=TrialState.COMPLETE, value=value))
    tracker = _GatedTracker()
    tracker.gate.set()  # opened here, on the caller's thread: nothing to wait for
    with SearchRecords.opening(config, print, Afresh(), tracker) as opening:
        assert not opening.has_work  # no runner needed
        outcome = opening.records().nothing_to_do()
    assert outcome is not None


def test_what_opening_the_records_raised_is_raised_where_they_are_asked_for(
    config: RunConfig,
) -> None:
    class Refused(MemoryTracker):
        def running_run_ids(self) -> set[str]:
            raise HpsearchError("the two stores disagree")

    with (
        SearchRecords.opening(config, print, Afresh(), Refused()) as opening,
        pytest.raises(HpsearchError, match="disagree"),
    ):
        opening.records()
