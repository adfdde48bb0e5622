"""The Optuna study: storage, samplers and pruners from config, budget, lost-trial recovery."""

from __future__ import annotations

import importlib.metadata
from datetime import datetime, timedelta

import optuna
import pytest
import sqlalchemy
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from hpsearch import attrs
from hpsearch.config import PrunerSpec, RunConfig, StudySpec, load_config
from hpsearch.errors import ConfigError, StudyError
from hpsearch.pruning import make_pruner
from hpsearch.study import (
    GRACE_PERIOD_S,
    LOST_REASON,
    MAX_LOST_RETRIES,
    BudgetCount,
    BudgetDecision,
    BudgetTally,
    TrialBudget,
    count_budget,
    open_study,
)
from hpsearch.study import _storage as storage_module
from hpsearch.trial.protocol import Outcome
from tests.conftest import ConfigWriter, age_heartbeat


def test_open_creates_then_continues(config: RunConfig) -> None:
    handle = open_study(config)
    trial = handle.ask(config.search_space.distributions())
    handle.study.tell(trial, 1.0)
    again = open_study(config)
    assert again.name == "test-study"
    assert [t.state for t in again.study.trials] == [TrialState.COMPLETE]
    assert again.study.metric_names == ["score"]


def test_a_driver_records_its_config_version_and_train_on_the_study(config: RunConfig) -> None:
    assert "hpsearch.config" not in open_study(config).study.user_attrs  # a reader: no record
    study = open_study(config, as_driver=True).study
    assert study.user_attrs["hpsearch.train"] == config.train
    assert study.user_attrs["hpsearch.version"] == importlib.metadata.version("hpsearch")
    recorded = study.user_attrs["hpsearch.config"]
    assert recorded["study"]["name"] == "test-study"
    assert RunConfig.model_validate(recorded).search_space.distributions().keys() == {"x"}


def test_changed_direction_is_refused(config: RunConfig, write_config: ConfigWriter) -> None:
    open_study(config)
    flipped = load_config(
        write_config({"objective": {"direction": "minimize"}}, name="flipped.yaml")
    )
    with pytest.raises(StudyError, match="optimises \\['maximize'\\]"):
        open_study(flipped)


def test_changed_metric_is_refused(config: RunConfig, write_config: ConfigWriter) -> None:
    open_study(config)
    renamed = load_config(write_config({"objective": {"metric": "loss"}}, name="renamed.yaml"))
    with pytest.raises(StudyError, match="created for metrics"):
        open_study(renamed)


def test_unreachable_storage_is_a_study_error(write_config: ConfigWriter) -> None:
    config = load_config(write_config({"study": {"storage": "postgresql://nobody@127.0.0.1:1/x"}}))
    with pytest.raises(StudyError, match=r"study\.storage: cannot open"):
        open_study(config)


def test_tables_created_by_another_program_at_the_same_moment_are_opened(
    config: RunConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An Optuna script opening the same new database creates the tables while this
    # driver does: the driver's CREATE collides (PostgreSQL's words below), the
    # tables are there, and a second try opens them.
    real = optuna.storages.RDBStorage
    calls: list[str] = []

    def racing(url: str, **kwargs: object) -> optuna.storages.RDBStorage:
        calls.append(url)
        if len(calls) == 1:
            real(url)  # the other program's tables
            raise sqlalchemy.exc.IntegrityError(
                "CREATE TYPE trialstate",
                {},
                Exception('duplicate key value violates unique constraint "pg_type_typname"'),
            )
        return real(url, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(storage_module, "RDBStorage", racing)
    handle = open_study(config)
    assert len(calls) == 2
    assert handle.study.study_name == config.study.name

    # Any other database error is said at once, as before.
    def refused(url: str, **kwargs: object) -> optuna.storages.RDBStorage:
        raise sqlalchemy.exc.IntegrityError("INSERT", {}, Exception("null value in column"))

    monkeypatch.setattr(storage_module, "RDBStorage", refused)
    with pytest.raises(StudyError, match=r"study\.storage: cannot open .*null value"):
        open_study(config)


def test_pruner_missing_argument_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        make_pruner(PrunerSpec(type="percentile"), "c.yaml")
    assert str(info.value) == (
        "c.yaml: study.pruner.options: PercentilePruner needs the option(s) percentile; "
        "give them, e.g. options: {percentile: ...}"
    )
    with pytest.raises(ConfigError, match=r"PercentilePruner rejected the options: .*; check"):
        make_pruner(PrunerSpec(type="percentile", options={"percentile": 250.0}), "c.yaml")
    assert isinstance(
        make_pruner(PrunerSpec(type="percentile", options={"percentile": 25.0})),
        optuna.pruners.PercentilePruner,
    )


@pytest.mark.parametrize(
    ("n_trials", "count", "decision"),
    [
        (4, BudgetCount(finished=0, running=0), BudgetDecision.START),
        (4, BudgetCount(finished=2, running=1), BudgetDecision.START),
        (4, BudgetCount(finished=2, running=2), BudgetDecision.WAIT),
        (4, BudgetCount(finished=4, running=0), BudgetDecision.FINISHED),
        (None, BudgetCount(finished=99, running=3), BudgetDecision.START),
    ],
)
def test_budget_decisions(
    n_trials: int | None, count: BudgetCount, decision: BudgetDecision
) -> None:
    assert TrialBudget(n_trials, None).decide(count) is decision


@pytest.mark.parametrize(
    ("n_trials", "grid", "reached"), [(20, 3, 3), (None, 4, 4), (2, 3, 2), (5, None, 5)]
)
def test_a_grid_sampler_ends_the_search_once_each_of_its_points_ran(
    n_trials: int | None, grid: int | None, reached: int
) -> None:
    # As Optuna's grid stops its study, whatever study.optimize's n_trials.
    budget = TrialBudget.from_settings(StudySpec(name="s", n_trials=n_trials), grid=grid)
    assert (budget.n_trials, budget.grid) == (reached, grid)
    assert budget.decide(BudgetCount(finished=reached, running=0)) is BudgetDecision.FINISHED


def test_timeout_finishes_the_search() -> None:
    now = [100.0]
    budget = TrialBudget(10, 60.0, clock=lambda: now[0])
    assert budget.decide(BudgetCount(0, 0)) is BudgetDecision.START
    now[0] = 160.0
    assert budget.timed_out()
    assert budget.decide(BudgetCount(0, 0)) is BudgetDecision.FINISHED
    assert not budget.overdue()  # no grace: running trials finish
    assert budget.short_of(BudgetCount(finished=4, running=2)) == 6


def test_running_trials_are_overdue_a_grace_after_the_timeout() -> None:
    now = [100.0]
    budget = TrialBudget(None, 60.0, clock=lambda: now[0], grace_s=30.0)
    now[0] = 189.0
    assert budget.timed_out()
    assert not budget.overdue()
    now[0] = 190.0
    assert budget.overdue()
    assert budget.short_of(BudgetCount(finished=1, running=0)) == 0  # no n_trials to fall short of


def test_lost_trials_are_failed_requeued_and_not_counted(config: RunConfig) -> None:
    handle = open_study(config)
    lost = handle.ask(config.search_space.distributions())
    alive = handle.ask(config.search_space.distributions())
    assert count_budget(handle.study.trials) == BudgetCount(finished=0, running=2)
    assert handle.reclaim_stale() == []  # both stamped just now
    # The driver that asked for `lost` is gone: its last stamp is older than the grace period.
    age_heartbeat(config.study.storage, lost.number, seconds=GRACE_PERIOD_S + 60)

    reclaimed = handle.reclaim_stale()

    assert [t.number for t in reclaimed] == [lost.number]
    states = {t.number: t.state for t in handle.study.trials}
    assert states[lost.number] == TrialState.FAIL
    assert states[alive.number] == TrialState.RUNNING
    waiting = [t for t in handle.study.trials if t.state == TrialState.WAITING]
    assert len(waiting) == 1
    assert RetryHeartbeatStaleTrialCallback.retry_history(waiting[0]) == [lost.number]
    # The lost trial says why it failed; its re-run names it and carries no reason.
    failed = handle.study.trials[lost.number].user_attrs
    assert (failed[attrs.OUTCOME], failed[attrs.ERROR]) == ("interrupted", LOST_REASON)
    assert LOST_REASON.startswith("interrupted: its driver stopped")
    assert waiting[0].user_attrs[attrs.RETRY_OF] == lost.number
    assert attrs.ERROR not in waiting[0].user_attrs
    assert attrs.OUTCOME not in waiting[0].user_attrs
    assert count_budget(handle.study.trials) == BudgetCount(finished=0, running=1)
    retry = handle.ask(config.search_space.distributions())
    assert retry.params == lost.params
    assert handle.reclaim_stale() == []  # the retry is stamped alive


def test_a_configuration_lost_with_its_driver_again_and_again_is_not_queued_forever(
    config: RunConfig,
) -> None:
    handle = open_study(config)
    space = config.search_space.distributions()
    first = handle.ask(space)
    lost = [first.number]
    for _ in range(MAX_LOST_RETRIES + 1):
        age_heartbeat(config.study.storage, lost[-1], seconds=GRACE_PERIOD_S + 60)
        assert [t.number for t in handle.reclaim_stale()] == [lost[-1]]
        waiting = [t for t in handle.study.trials if t.state == TrialState.WAITING]
        if not waiting:
            break
        retry = handle.ask(space)  # the queued copy, asked by the next driver
        assert retry.params == first.params
        lost.append(retry.number)
    # Lost three times (the first run and two retries): not queued a fourth time.
    assert len(lost) == MAX_LOST_RETRIES + 1
    assert not [t for t in handle.study.trials if t.state == TrialState.WAITING]
    assert [t.state for t in handle.study.trials] == [TrialState.FAIL] * len(lost)


def test_an_interrupted_trial_is_queued_again_and_counted_once(config: RunConfig) -> None:
    handle = open_study(config)
    stopped = handle.ask(config.search_space.distributions())
    handle.study.tell(stopped, state=TrialState.FAIL)
    handle.retry_later(stopped.number, stopped.params)
    waiting = [t for t in handle.study.trials if t.state == TrialState.WAITING]
    assert [t.user_attrs[attrs.RETRY_OF] for t in waiting] == [stopped.number]
    assert count_budget(handle.study.trials) == BudgetCount(finished=0, running=0)


def test_an_interrupted_trial_whose_rerun_was_never_queued_is_queued_a_grace_later(
    config: RunConfig,
) -> None:
    # Its driver set it FAIL (interrupted) and failed before queueing the re-run, the
    # write after (its disk full, or killed): it counted toward n_trials, and never ran.
    handle = open_study(config)
    stopped = handle.ask(config.search_space.distributions())
    stopped.set_user_attr(attrs.OUTCOME, Outcome.INTERRUPTED.value)
    stopped.set_user_attr(attrs.METRICS, {"val_accuracy": 0.8})  # what it had reported
    handle.study.tell(stopped, state=TrialState.FAIL)
    ended = handle.study.get_trials(deepcopy=False)[stopped.number].datetime_complete
    assert ended is not None
    assert count_budget(handle.study.trials) == BudgetCount(finished=1, running=0)

    handle.reclaim_stale()  # at once: a live driver queues it itself
    assert not [t for t in handle.study.trials if t.state == TrialState.WAITING]

    later = ended + timedelta(seconds=GRACE_PERIOD_S)
    assert handle.reclaim_stale(now=later) == []  # nothing was running: none failed now
    waiting = [t for t in handle.study.trials if t.state == TrialState.WAITING]
    assert [(t.params, t.user_attrs[attrs.RETRY_OF]) for t in waiting] == [
        (stopped.params, stopped.number)
    ]
    # The re-run starts from what it had reported, not as a trial that ended with it.
    assert waiting[0].user_attrs[attrs.RESUMES_METRICS] == {"val_accuracy": 0.8}
    assert attrs.METRICS not in waiting[0].user_attrs
    assert count_budget(handle.study.trials) == BudgetCount(finished=0, running=0)
    handle.reclaim_stale(now=later)  # queued once
    assert len([t for t in handle.study.trials if t.state == TrialState.WAITING]) == 1


def test_a_trial_that_failed_of_itself_is_not_queued_again(config: RunConfig) -> None:
    handle = open_study(config)
    failed = handle.ask(config.search_space.distributions())
    failed.set_user_attr(attrs.OUTCOME, Outcome.FAIL.value)
    handle.study.tell(failed, state=TrialState.FAIL)
    later = datetime.now() + timedelta(seconds=GRACE_PERIOD_S + 60)
    handle.reclaim_stale(now=later)
    assert [t.state for t in handle.study.trials] == [TrialState.FAIL]


def test_resumed_seeded_search_does_not_repeat_itself(config: RunConfig) -> None:
    first = open_study(config)
    distributions = config.search_space.distributions()
    for _ in range(2):
        trial = first.ask(distributions)
        first.study.tell(trial, 0.0)
    resumed = open_study(config)
    new = [resumed.ask(distributions).params["x"] for _ in range(2)]
    assert not set(new) & {t.params["x"] for t in first.study.trials[:2]}


def test_the_budget_kept_across_reads_counts_as_a_fresh_count() -> None:
    # A study that grows as a search's does: a tally kept from read to read (as the
    # scheduler keeps it) counts what a fresh count of the same trials counts.
    study = optuna.create_study()
    tally = BudgetTally()

    def counted(finished: int, running: int) -> None:
        trials = study.get_trials(deepcopy=False)
        assert tally.count(trials) == BudgetCount(finished=finished, running=running)
        assert count_budget(trials) == BudgetCount(finished=finished, running=running)

    study.add_trial(optuna.trial.create_trial(value=1.0))
    running = study.ask()
    study.add_trial(optuna.trial.create_trial(state=TrialState.FAIL))  # trial 2
    study.add_trial(optuna.trial.create_trial(state=TrialState.PRUNED))  # trial 3
    counted(finished=3, running=1)
    study.enqueue_trial({}, user_attrs={attrs.RETRY_OF: 2})  # 2 runs again: not counted
    counted(finished=2, running=1)
    study.tell(running, 0.5)
    study.enqueue_trial({}, user_attrs={attrs.ALONE_RETRY_OF: 3})  # 3 runs again alone
    counted(finished=2, running=0)
    for _ in range(2):
        study.tell(study.ask(), 0.1)  # the two re-runs
    counted(finished=4, running=0)
    assert tally.unfinished == []


def test_a_driver_asks_a_queued_trial_first_then_new_ones_each_stamped_alive(
    config: RunConfig,
) -> None:
    handle = open_study(config, as_driver=True)
    handle.study.enqueue_trial({"x": 0.25})  # another driver's re-run, say

    queued = handle.ask()  # define-by-run, as the driver asks
    new = [handle.ask() for _ in range(2)]

    assert queued.suggest_float("x", 0.0, 1.0) == 0.25  # the queue's parameters
    assert [t.number for t in (queued, *new)] == [0, 1, 2]
    assert all(0.0 <= t.suggest_float("x", 0.0, 1.0) <= 1.0 for t in new)
    assert [t.state for t in handle.study.get_trials()] == [TrialState.RUNNING] * 3
    # Each is stamped alive as it is asked: one lost now is reclaimed, the others not.
    age_heartbeat(config.study.storage, new[0].number, seconds=GRACE_PERIOD_S + 60)
    assert [t.number for t in handle.reclaim_stale()] == [new[0].number]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # Study.ask, as a bare driver
def test_a_trial_its_driver_never_stamped_is_reclaimed_a_grace_period_later(
    config: RunConfig,
) -> None:
    handle = open_study(config, as_driver=True)
    # A driver that died between Optuna's creating its trial and stamping it (killed,
    # or its disk full) left it RUNNING with no heartbeat at all.
    orphan = handle.study.ask()
    assert handle.reclaim_stale() == []  # stamped now: its driver may still live
    age_heartbeat(config.study.storage, orphan.number, seconds=GRACE_PERIOD_S + 60)

    reclaimed = handle.reclaim_stale()

    assert [t.number for t in reclaimed] == [orphan.number]
    states = [t.state for t in handle.study.get_trials()]
    assert states == [TrialState.FAIL, TrialState.WAITING]  # queued to run again
