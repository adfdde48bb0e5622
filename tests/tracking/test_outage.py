"""A tracking server out of reach: writes kept in order, landed when it answers, said in a line."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import requests
from mlflow.exceptions import MlflowException

from hpsearch.tracking import MemoryTracker, MlflowTracker, OutageTracker, RunStatus
from hpsearch.tracking._outage import unreachable


class Server(MemoryTracker):
    """A tracker whose server can be switched off: every write then fails as MLflow's do."""

    def __init__(self) -> None:
        super().__init__("outage")
        self.up = True
        self.held: list[tuple[str, dict[str, float], int]] = []  # batched, not yet written

    def _check(self) -> None:
        if not self.up:
            try:
                raise requests.exceptions.ConnectionError("Connection refused")
            except requests.exceptions.ConnectionError:
                # As MLflow wraps it: the requests error is the implicit context.
                raise MlflowException(  # noqa: B904
                    "API request to http://127.0.0.1:1/api/2.0/mlflow/runs/create failed "
                    "with exception Connection refused"
                )

    def start_run(self, name: str, *args: Any, **kwargs: Any) -> str:
        self._check()
        return super().start_run(name, *args, **kwargs)

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int) -> None:
        # Batched like MlflowTracker: held, then written; a failed write keeps them held.
        self.held.append((run_id, dict(metrics), step))
        self.flush()

    def flush(self, older_than_s: float = 0.0) -> None:
        self._check()
        for run_id, metrics, step in self.held:
            super().log_metrics(run_id, metrics, step)
        self.held.clear()

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        self._check()
        super().set_tags(run_id, tags)

    def end_run(self, run_id: str, status: RunStatus) -> None:
        self._check()
        super().end_run(run_id, status)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _outage(server: Server, clock: Clock, said: list[str]) -> OutageTracker:
    return OutageTracker(
        server, "http://127.0.0.1:1", said.append, clock=clock, wall=lambda: 0.0, retry_s=5.0
    )


def test_writes_kept_while_the_server_is_out_of_reach_land_in_order_when_it_answers() -> None:
    server, clock, said = Server(), Clock(), list[str]()
    tracker = _outage(server, clock, said)
    parent = tracker.start_run("search")  # the server answers: written through
    assert parent in server.runs
    assert tracker.down_for() is None

    server.up = False
    trial = tracker.start_run("trial-0", params={"lr": 0.1}, parent_run_id=parent)
    assert trial.startswith("pending-")  # a stand-in: the search goes on
    ids: list[str] = []
    tracker.when_created(trial, ids.append)
    tracker.log_metrics(trial, {"loss": 1.0}, 0)
    tracker.log_metrics(trial, {"loss": 0.5}, 1)
    tracker.set_tags(parent, {"progress": "1/2"})
    tracker.end_run(trial, RunStatus.FINISHED)
    assert len(said) == 1
    assert said[0].startswith("tracking server http://127.0.0.1:1 unreachable since ")
    clock.now += 7.0
    assert tracker.down_for() == pytest.approx(7.0)
    assert tracker.kept() == 5
    assert ids == []

    assert tracker.drain(timeout_s=0.0) == 5  # still down: nothing lost, nothing landed
    server.up = True
    assert tracker.drain(timeout_s=1.0) == 0
    assert tracker.down_for() is None
    assert said[-1] == (
        "tracking server http://127.0.0.1:1 reachable again after 7 s: 5 kept write(s) landed"
    )
    (created,) = ids  # whoever waited for the run's id got the server's
    run = server.runs[created]
    assert run.tags["mlflow.parentRunId"] == parent
    assert run.params == {"lr": "0.1"}
    assert run.metrics == [("loss", 1.0, 0), ("loss", 0.5, 1)]
    assert run.status == "FINISHED"
    assert server.runs[parent].tags["progress"] == "1/2"
    # Through again: the next write goes straight to the server.
    tracker.log_metrics(created, {"loss": 0.25}, 2)
    assert run.metrics[-1] == ("loss", 0.25, 2)


def test_a_batch_held_beneath_is_not_sent_twice_and_proves_the_server_back() -> None:
    server, clock, said = Server(), Clock(), list[str]()
    tracker = _outage(server, clock, said)
    run = tracker.start_run("trial-0")
    server.up = False
    tracker.log_metrics(run, {"loss": 1.0}, 0)  # held beneath when its write failed
    assert tracker.down_for() is not None
    assert tracker.kept() == 0
    assert tracker.drain(timeout_s=0.0) == 0
    assert tracker.down_for() is not None  # the held batch is the probe: still down
    server.up = True
    tracker.drain(timeout_s=1.0)
    assert tracker.down_for() is None
    assert server.runs[run].metrics == [("loss", 1.0, 0)]


def test_a_write_the_server_refuses_is_raised_not_kept() -> None:
    server, clock, said = Server(), Clock(), list[str]()
    tracker = _outage(server, clock, said)

    def refuse(*_: Any, **__: Any) -> str:
        raise MlflowException("INVALID_PARAMETER_VALUE: name too long")

    server.start_run = refuse  # type: ignore[method-assign]
    with pytest.raises(MlflowException, match="too long"):
        tracker.start_run("trial-0")
    assert tracker.down_for() is None
    assert said == []


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (requests.exceptions.ConnectionError("refused"), True),
        (requests.exceptions.ReadTimeout("read timed out"), True),
        (MlflowException("API request to http://x/api failed with exception refused"), True),
        (MlflowException("RESOURCE_DOES_NOT_EXIST: run not found"), False),
        (OSError("No space left on device"), False),
    ],
)
def test_out_of_reach_is_told_from_a_refusal(error: Exception, expected: bool) -> None:
    assert unreachable(error) is expected


def test_a_failed_batch_keeps_its_records_ahead_of_later_ones(tmp_path: Path) -> None:
    tracker = MlflowTracker(f"sqlite:///{tmp_path}/mlflow.db", "keep", str(tmp_path / "a"))
    run = tracker.start_run("trial-0")
    tracker.log_metrics(run, {"loss": 1.0}, 0)
    write: Callable[..., Any] = tracker._client.log_batch
    calls = []

    def fail_once(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise requests.exceptions.ConnectionError("refused")
        write(*args, **kwargs)

    tracker._client.log_batch = fail_once  # type: ignore[method-assign]
    with pytest.raises(requests.exceptions.ConnectionError):
        tracker.flush()
    tracker.log_metrics(run, {"loss": 0.5}, 1)
    tracker.end_run(run, RunStatus.FINISHED)
    history = tracker._client.get_metric_history(run, "loss")
    assert [(m.step, m.value) for m in history] == [(0, 1.0), (1, 0.5)]


def test_a_run_never_created_is_told_so_when_the_search_gives_up() -> None:
    server, clock, said = Server(), Clock(), list[str]()
    tracker = _outage(server, clock, said)
    server.up = False
    stand_in = tracker.start_run("trial-0")
    tracker.log_metrics(stand_in, {"score": 1.0}, 0)
    created, never = list[str](), list[str]()
    tracker.when_created(stand_in, created.append, lambda: never.append(stand_in))

    assert tracker.give_up() == 2  # the run and its metrics, dropped
    assert (created, never) == ([], [stand_in])
    assert tracker.kept() == 0
    server.up = True
    tracker.drain(0.0)
    assert list(server.runs) == []  # nothing written after giving up


def test_a_run_refused_when_its_creation_is_retried_takes_its_writes_along() -> None:
    server, clock, said = Server(), Clock(), list[str]()
    tracker = _outage(server, clock, said)
    server.up = False
    refused = tracker.start_run("trial-0")  # kept; the server will refuse it
    tracker.set_tags(refused, {"a": "b"})
    tracker.end_run(refused, RunStatus.FINISHED)
    kept = tracker.start_run("trial-1")
    tracker.end_run(kept, RunStatus.FINISHED)
    server.up = True
    create = server.start_run

    def refuse_trial_0(name: str, *args: Any, **kwargs: Any) -> str:
        if name == "trial-0":
            raise MlflowException("INVALID_PARAMETER_VALUE: a param too long")
        return create(name, *args, **kwargs)

    server.start_run = refuse_trial_0  # type: ignore[method-assign]
    clock.now += 5.0
    assert tracker.drain(1.0) == 0

    assert [run.name for run in server.runs.values()] == ["trial-1"]
    assert [run.status for run in server.runs.values()] == [RunStatus.FINISHED]
    assert any("run trial-0" in line and "not written" in line for line in said)
    assert tracker.down_for() is None  # the outage is over: the rest landed
    tracker.set_tags(refused, {"c": "d"})  # later writes to it: dropped, not kept
    assert tracker.kept() == 0


def test_a_server_back_but_slower_than_the_search_writes_is_not_counted_out_of_reach() -> None:
    # The kept writes land one a second while the search keeps adding to them: the
    # server answers, so the outage limit must not run out while the queue drains.
    clock, said = Clock(), list[str]()
    seen: list[float | None] = []

    class Slow(Server):
        def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
            super().set_tags(run_id, tags)
            clock.now += 1.0  # one answer a second
            seen.append(tracker.down_for())
            if len(seen) < 6:  # the search writes on meanwhile: kept behind the rest
                tracker.set_tags(run_id, {"progress": str(len(seen))})

    server = Slow()
    tracker = _outage(server, clock, said)
    parent = tracker.start_run("search")
    server.up = False
    tracker.start_run("trial-0", parent_run_id=parent)  # the outage starts
    tracker.set_tags(parent, {"progress": "0"})
    clock.now += 30.0
    assert tracker.down_for() == pytest.approx(30.0)
    server.up = True
    assert tracker.drain(timeout_s=60.0) == 0
    # Counted from the last answer: a second at most (from the outage's start, 31-36 s).
    assert len(seen) == 6
    assert all(d is not None and d <= 1.0 for d in seen), seen
    assert tracker.down_for() is None
    assert said[-1].startswith("tracking server http://127.0.0.1:1 reachable again after 36 s")
    assert server.runs[parent].tags["progress"] == "5"


def test_once_the_server_answers_again_a_new_write_waits_its_turn_and_the_outage_ends() -> None:
    # A search of short trials writes faster than the replay: kept without waiting,
    # its writes grew the queue faster than the server emptied it, and the outage
    # never ended. Once the server answers, a write waits its turn, as one straight
    # to the server waits for it.
    import threading

    answers = threading.Semaphore(0)
    written: list[str] = []

    class Answering(Server):
        """Answers one write each time the test lets it."""

        def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
            self._check()
            assert answers.acquire(timeout=30), "the test never let the server answer"
            super().log_text(run_id, text, artifact_file)
            written.append(text)

    server, clock, said = Answering(), Clock(), list[str]()
    tracker = _outage(server, clock, said)
    parent = tracker.start_run("search")
    server.up = False
    for step in range(3):
        tracker.log_text(parent, str(step), "progress.txt")  # kept at once: no answer
    assert tracker.kept() == 3
    server.up = True
    clock.now += 5.0
    tracker.flush()  # the retry starts, and writes the first kept write when let
    answers.release()
    search = threading.Thread(target=tracker.log_text, args=(parent, "3", "progress.txt"))
    for _ in range(3000):  # until the first kept write has left the queue, answered
        if tracker.kept() == 2:
            break
        threading.Event().wait(0.01)
    assert written == ["0"]
    search.start()
    search.join(0.5)
    assert search.is_alive()  # the search waits its turn behind the kept writes
    for _ in range(3):
        answers.release()
    search.join(30)
    assert not search.is_alive()
    assert written == ["0", "1", "2", "3"]  # in order: its write after the kept ones
    assert tracker.kept() == 0
    assert tracker.down_for() is None
    assert said[-1].startswith("tracking server http://127.0.0.1:1 reachable again after 5 s")
