"""The order of the scheduler's questions: time, room, a re-run alone, the budget, then Optuna.

Real parts (ledger, Optuna study, MLflow) from the driver harness; the policy
records what it was asked.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace

from optuna.trial import FrozenTrial, TrialState

from hpsearch import attrs
from hpsearch.config import load_config
from hpsearch.placement import (
    Admission,
    ClusterCapacity,
    ResourcePolicy,
    RunningTrial,
    StaticPolicy,
)
from hpsearch.scheduler import RECOUNT_MARGIN, RECOUNT_S, Hold
from hpsearch.simulation import LoadModelBackend
from hpsearch.telemetry import GpuInfo
from hpsearch.trial.protocol import EndReport, Outcome, TrialLaunch
from tests.conftest import ConfigWriter
from tests.harness import Driver, DriverFactory, end


class Recording(ResourcePolicy):
    """A static policy that keeps every question it was asked."""

    def __init__(self, trials_per_gpu: int = 1, room: bool = True) -> None:
        self.inner = StaticPolicy(trials_per_gpu=trials_per_gpu)
        self.room = room
        self.asked: list[tuple[int, bool]] = []

    def admit(
        self,
        running: Sequence[RunningTrial],
        capacity: ClusterCapacity,
        *,
        whole_gpu: bool = False,
    ) -> Admission | None:
        self.asked.append((len(running), whole_gpu))
        return self.inner.admit(running, capacity, whole_gpu=whole_gpu) if self.room else None


def test_a_timed_out_search_finishes_before_asking_the_policy_or_optuna(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    policy = Recording()
    d = driver(load_config(write_config({"study": {"timeout": 60}})), policy=policy)
    assert isinstance(d.parts.scheduler.suggest("a"), TrialLaunch)
    d.clock.now += 61.0
    assert d.parts.scheduler.suggest("b") is Hold.FINISHED
    assert len(policy.asked) == 1
    assert len(d.handle.study.trials) == 1


def test_no_room_waits_without_asking_optuna(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    policy = Recording(room=False)
    d = driver(load_config(write_config()), policy=policy)
    assert d.parts.scheduler.suggest("a") is Hold.WAIT
    assert policy.asked == [(0, False)]
    assert d.handle.study.trials == []


def test_a_refusal_does_not_wait_for_another_driver_holding_the_stores_lock(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    # While trials fill every slot, most calls are refused: one that waited for the
    # lock other drivers take to ask for their trials would cost each refusal a lock
    # on the shared store (on PostgreSQL, statements over the network).
    policy = Recording(room=False)
    d = driver(load_config(write_config()), policy=policy)
    answers: list[TrialLaunch | Hold] = []
    asking = threading.Thread(target=lambda: answers.append(d.parts.scheduler.suggest("a")))
    with d.handle.exclusive():  # another driver, asking for its trial
        asking.start()
        asking.join(timeout=30)
        answered = list(answers)
    asking.join()
    assert answered == [Hold.WAIT]
    assert policy.asked == [(0, False)]


def test_the_budget_waits_for_running_trials_then_finishes(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(
        load_config(write_config({"study": {"n_trials": 2}})),
        policy=StaticPolicy(cpus_per_trial=1, trials_per_gpu=0),
    )
    assert isinstance(d.parts.scheduler.suggest("a"), TrialLaunch)
    assert isinstance(d.parts.scheduler.suggest("b"), TrialLaunch)
    d.ledger.started("a")
    d.ledger.started("b")
    assert d.parts.scheduler.suggest("c") is Hold.WAIT  # two running count toward two
    d.complete("a", 0.5)
    assert d.parts.scheduler.suggest("c") is Hold.WAIT
    d.complete("b", 0.6)
    assert d.parts.scheduler.suggest("c") is Hold.FINISHED
    assert len(d.handle.study.trials) == 2


def test_a_trial_that_asks_the_search_to_stop_ends_it_once_the_running_ones_end(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(
        load_config(write_config({"study": {"n_trials": 6}})),
        policy=StaticPolicy(cpus_per_trial=1, trials_per_gpu=0),
    )
    for launch in ("a", "b"):
        assert isinstance(d.parts.scheduler.suggest(launch), TrialLaunch)
        d.ledger.started(launch)
    stopping = replace(end(Outcome.COMPLETE, score=0.9), end=EndReport(stop_search="0.9 is enough"))
    d.ledger.event("a", stopping)
    assert d.ledger.ended("a") is Outcome.COMPLETE
    assert d.parts.scheduler.suggest("c") is Hold.FINISHED  # no trial starts after it
    assert d.parts.budget is not None
    assert d.parts.budget.stopped == "trial 0 asked it to (0.9 is enough)"
    d.complete("b", 0.5)  # the one running finishes, as under Optuna's optimize
    assert [t.state for t in d.handle.study.trials] == [TrialState.COMPLETE] * 2


def test_a_waiting_rerun_alone_is_asked_for_a_whole_gpu(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    policy = Recording(trials_per_gpu=2)
    gpus = LoadModelBackend([GpuInfo(0, "sim", 6141.0, 115.0)])
    d = driver(load_config(write_config()), policy=policy, gpus=gpus)
    d.handle.study.enqueue_trial({"x": 0.25}, user_attrs={attrs.ALONE_RETRY_OF: 99})
    config = d.parts.scheduler.suggest("alone")
    assert isinstance(config, TrialLaunch)
    assert config.admission.gpus == 1.0
    assert policy.asked == [(0, False), (0, True)]
    assert d.handle.study.trials[0].state == TrialState.RUNNING
    d.ledger.started("alone")
    d.complete("alone", 0.5)
    shared = d.parts.scheduler.suggest("next")  # nothing re-runs now: a shared GPU
    assert isinstance(shared, TrialLaunch)
    assert shared.admission.gpus == 0.5


def test_a_budget_held_by_another_drivers_trials_waits_on_them_elsewhere(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    path = write_config({"study": {"n_trials": 2}})
    d = driver(load_config(path), policy=StaticPolicy(cpus_per_trial=1, trials_per_gpu=0))
    elsewhere = d.handle.ask()  # another driver's trial, still running
    assert isinstance(d.parts.scheduler.suggest("a"), TrialLaunch)
    d.ledger.started("a")
    # Two running, one of them this driver's: its end, in this runner's time, frees a slot.
    assert d.parts.scheduler.suggest("b") is Hold.WAIT
    d.complete("a", 0.5)
    # Only the other driver's trial holds the budget now: it ends in wall time.
    assert d.parts.scheduler.suggest("b") is Hold.ELSEWHERE
    d.handle.study.tell(elsewhere, 0.7)
    assert d.parts.scheduler.suggest("b") is Hold.FINISHED


def test_a_fused_group_takes_at_most_one_gpus_share_of_the_trials_left(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    config = write_config(
        {
            "study": {"n_trials": 8},
            "train": "hpsearch.workloads.simulated_gpu:train",
            "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1}},
            "fusion": {
                "mode": "fixed",
                "members": 8,
                "train": "hpsearch.workloads.simulated_gpu:train_members",
            },
        }
    )
    gpus = LoadModelBackend([GpuInfo(i, "sim", 6141.0, 115.0) for i in (0, 1)])
    d = driver(load_config(config), policy=StaticPolicy(trials_per_gpu=1), gpus=gpus)
    first, second = d.parts.scheduler.suggest("a"), d.parts.scheduler.suggest("b")
    assert isinstance(first, TrialLaunch)
    assert isinstance(second, TrialLaunch)
    # 8 trials left on 2 GPUs: 4 each, not 8 on the first GPU and the second idle.
    assert [len(first.members), len(second.members)] == [4, 4]


def _reads_counted(d: Driver) -> list[int]:
    """How often the scheduler reads the study's trials (a spy on the ledger's reads)."""
    reads: list[int] = []
    read = d.ledger.study_trials

    def counted() -> list[FrozenTrial]:
        reads.append(1)
        return read()

    d.ledger.study_trials = counted  # type: ignore[method-assign]
    return reads


def _one_at_a_time(d: Driver, trials: int, seconds_each: float) -> None:
    """Start, run for ``seconds_each`` (the driver's clock) and complete ``trials`` trials,
    one after the other, each started as the scheduler says."""
    for number in range(trials):
        assert isinstance(d.parts.scheduler.suggest(f"t{number}"), TrialLaunch)
        d.ledger.started(f"t{number}")
        d.clock.now += seconds_each
        d.complete(f"t{number}", 0.5)


def test_a_driver_alone_on_its_study_reads_it_once_however_near_its_budget(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(
        load_config(write_config({"study": {"n_trials": 6}})),
        policy=StaticPolicy(cpus_per_trial=1, trials_per_gpu=0),
    )
    reads = _reads_counted(d)
    _one_at_a_time(d, 6, 2.0)  # past the second a count is reused for anyway
    # Every trial since the first read was this driver's (one statement says so): the
    # count it read, with its own trials since, decided each start as a read would.
    assert len(reads) == 1
    assert d.parts.scheduler.suggest("t6") is Hold.FINISHED  # no room: read again
    assert len(reads) == 2
    assert len(d.handle.study.trials) == 6


def test_a_trial_another_driver_started_since_the_count_is_counted_before_the_next_start(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(
        load_config(write_config({"study": {"n_trials": 3}})),
        policy=StaticPolicy(cpus_per_trial=1, trials_per_gpu=0),
    )
    assert isinstance(d.parts.scheduler.suggest("a"), TrialLaunch)
    d.ledger.started("a")
    d.clock.now += 2.0
    d.handle.ask()  # another driver's trial, running
    assert isinstance(d.parts.scheduler.suggest("b"), TrialLaunch)
    d.ledger.started("b")
    # Three running: the budget of three is held, whatever this driver's own count said.
    assert d.parts.scheduler.suggest("c") is Hold.WAIT
    assert len(d.handle.study.trials) == 3


def test_far_from_its_budgets_end_a_driver_reads_its_study_again_each_second(
    write_config: ConfigWriter, driver: DriverFactory
) -> None:
    d = driver(
        load_config(write_config({"study": {"n_trials": 40}})),
        policy=StaticPolicy(cpus_per_trial=1, trials_per_gpu=0),
    )
    reads = _reads_counted(d)
    _one_at_a_time(d, 40, RECOUNT_S / 2)
    # A read each second while more than RECOUNT_MARGIN trials were left (each fetches
    # only what changed since the last, so the last read is not the whole study), then
    # none until the budget was spent: one statement said every trial since was ours.
    far = 40 - RECOUNT_MARGIN
    assert len(reads) == far // 2
    assert d.parts.scheduler.suggest("t40") is Hold.FINISHED
    assert len(d.handle.study.trials) == 40
