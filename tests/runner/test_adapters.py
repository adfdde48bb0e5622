"""Tune's searcher and callback over the scheduler and the ledger; both survive Tune's pickling."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from ray.tune.search import Searcher

from hpsearch.runner._adapters import Failure, LedgerCallback, SchedulerSearcher, SearchStopper
from hpsearch.runner._tune_dicts import tune_config, tune_result
from hpsearch.scheduler import Hold
from hpsearch.trial.death import node_lost
from hpsearch.trial.protocol import Assignment, EventKind, Outcome, TrialLaunch, WorkerEvent
from tests.harness import make_launch


class Answers:
    """A scheduler that answers from a list (the real one is tested in tests/test_scheduler.py)."""

    def __init__(self, *answers: TrialLaunch | Hold) -> None:
        self.answers = list(answers)
        self.late = False

    def suggest(self, launch_id: str) -> TrialLaunch | Hold:
        return self.answers.pop(0)

    def overdue(self) -> bool:
        return self.late


class Events:
    """Keeps what the callback tells the ledger."""

    def __init__(self) -> None:
        self.told: list[tuple[Any, ...]] = []

    def started(self, trial_id: str) -> None:
        self.told.append(("started", trial_id))

    def event(self, trial_id: str, event: WorkerEvent) -> None:
        self.told.append(("event", trial_id, event.kind))

    def ended(self, trial_id: str, crash: str | None = None) -> Outcome | None:
        self.told.append(("ended", trial_id, crash))
        return None

    def maintain(self, now: float | None = None) -> None:
        self.told.append(("maintain",))

    def unresponsive(self) -> list[str]:
        return []


class FakeTrial:
    def __init__(self, trial_id: str, error: str | None = None) -> None:
        self.trial_id = trial_id
        self._error = error

    def get_error(self) -> Exception | None:
        return RuntimeError(self._error) if self._error else None


ONE = make_launch({"x": 1})
TWO = make_launch({"x": 2})


def test_the_searcher_speaks_tunes_language() -> None:
    searcher = SchedulerSearcher(Answers(ONE, Hold.WAIT, Hold.ELSEWHERE, Hold.FINISHED))
    assert searcher.suggest("a") == tune_config(ONE)
    assert searcher.suggest("b") is None
    assert searcher.suggest("c") is None
    assert searcher.suggest("d") == Searcher.FINISHED


def test_the_searcher_does_the_upkeep_before_it_says_to_wait() -> None:
    # Tune idles in suggest() when nothing runs: reclaiming must happen there too.
    events = Events()
    searcher = SchedulerSearcher(
        Answers(Hold.WAIT, TWO, Hold.WAIT, Hold.WAIT), upkeep=events.maintain
    )
    assert searcher.suggest("a") == tune_config(TWO)  # freed by the upkeep
    assert searcher.suggest("b") is None
    assert events.told == [("maintain",), ("maintain",)]


def test_the_stopper_stops_the_whole_search_once_trials_are_overdue() -> None:
    source = Answers()
    stopper = SearchStopper(source)
    assert not stopper.stop_all()
    assert not stopper("a", {"training_iteration": 1})
    source.late = True
    assert stopper.stop_all()
    assert not stopper("a", {"training_iteration": 2})  # never one trial alone
    assert not pickle.loads(pickle.dumps(stopper)).stop_all()  # unpickled: no live source


def test_the_callback_forwards_every_event_and_ray_errors() -> None:
    events = Events()
    callback = LedgerCallback(events)
    report = WorkerEvent(EventKind.REPORT, step=0, metrics={"score": 1.0})
    trial: Any = FakeTrial("t1")
    callback.on_trial_start(0, [], trial)
    callback.on_trial_result(0, [], trial, tune_result(report))
    callback.on_trial_result(0, [], trial, {"not": "ours"})
    callback.on_trial_complete(0, [], trial)
    callback.on_trial_error(0, [], FakeTrial("t2", "the actor died"))  # type: ignore[arg-type]
    callback.on_step_end(0, [])
    assert events.told == [
        ("started", "t1"),
        ("event", "t1", EventKind.REPORT),
        ("ended", "t1", None),
        ("ended", "t2", "the actor died"),
        ("maintain",),
    ]


UNREACHABLE = (
    "The actor abc is unavailable: The actor is temporarily unavailable: RpcError: "
    "RPC error: Socket closed rpc_code: 14."
)


NODE = "3f2a9c1b" * 7  # a Ray node id: 56 hex digits


@pytest.mark.parametrize(("dead", "lost"), [({NODE}, True), (set(), False)])
def test_an_unreachable_worker_on_a_node_ray_then_marks_dead_is_a_lost_node(
    dead: set[str], lost: bool
) -> None:
    # Ray may call a lost node's actor unreachable before its node table says the
    # node died; the callback asks that table about the node the worker ran on.
    events = Events()
    asked: list[str] = []

    def node_gone(node_id: str) -> bool:
        asked.append(node_id)
        return node_id in dead

    callback = LedgerCallback(events, node_gone=node_gone)
    placed = WorkerEvent(EventKind.REPORT, step=0, assigned=Assignment(node_id=NODE))
    callback.on_trial_result(0, [], FakeTrial("t1"), tune_result(placed))  # type: ignore[arg-type]
    callback.on_trial_error(0, [], FakeTrial("t1", UNREACHABLE))  # type: ignore[arg-type]
    crash = events.told[-1][2]
    assert asked == [NODE]
    assert node_lost(crash) is lost
    assert crash.startswith(UNREACHABLE)


class FullDisk(Events):
    """A ledger whose store fails from its second write on."""

    def started(self, trial_id: str) -> None:
        if self.told:
            raise OSError(28, "No space left on device")
        super().started(trial_id)


def test_a_failure_on_hpsearchs_side_is_kept_stops_the_search_and_is_raised_after() -> None:
    failure, events = Failure(), FullDisk()
    callback = LedgerCallback(events, failure)
    stopper = SearchStopper(Answers(), failure)
    searcher = SchedulerSearcher(Answers(ONE), failure=failure)
    callback.on_trial_start(0, [], FakeTrial("t1"))  # type: ignore[arg-type]
    assert not stopper.stop_all()

    callback.on_trial_start(0, [], FakeTrial("t2"))  # type: ignore[arg-type]  # Tune never sees it
    callback.on_step_end(0, [])  # nothing more reaches the ledger: it would fail again

    assert events.told == [("started", "t1")]
    assert stopper.stop_all()
    assert searcher.suggest("t3") == Searcher.FINISHED
    with pytest.raises(OSError, match="No space left"):
        failure.raise_first()


def test_both_pickle_without_their_live_parts_and_refuse_to_run_unpickled() -> None:
    searcher = pickle.loads(pickle.dumps(SchedulerSearcher(Answers(Hold.WAIT))))
    callback = pickle.loads(pickle.dumps(LedgerCallback(Events())))
    with pytest.raises(RuntimeError, match="unpickled; it only runs in its driver"):
        searcher.suggest("a")
    with pytest.raises(RuntimeError, match="unpickled; it only runs in its driver"):
        callback.on_step_end(0, [])
