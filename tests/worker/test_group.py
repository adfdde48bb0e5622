"""A fused launch in its worker, without Ray: each member its own events, its own end."""

from __future__ import annotations

from typing import Any

from hpsearch.trial.protocol import Assignment, EventKind, Outcome, WorkerEvent
from hpsearch.worker import execute_group
from tests.harness import make_launch

HERE = Assignment(cpus=1.0, gpu_ids=(), node_id="node", pid=7)


def _run(
    members: list[dict[str, Any]],
    prune: set[tuple[int, int]] = frozenset(),  # type: ignore[assignment]
) -> tuple[list[WorkerEvent], dict[int, WorkerEvent]]:
    launch = make_launch(
        {}, number=10, members=members, fused_train="tests.train_functions:members_quick"
    )
    sent: list[WorkerEvent] = []

    def oracle_for(number: int) -> Any:
        return lambda step: (number, step) in prune

    ends = execute_group(launch, assigned=HERE, send=sent.append, oracle_for=oracle_for)
    return sent, {end.member: end for end in ends if end.member is not None}


def test_each_member_reports_and_ends_as_its_own_trial() -> None:
    sent, ends = _run(
        [{"x": 0.1, "steps": 3}, {"x": 0.9, "steps": 3}, {"x": 0.5, "steps": 3}],
        prune={(12, 2)},
    )
    reports = {n: [e.step for e in sent if e.member == n] for n in (10, 11, 12)}
    assert reports == {10: [0, 1, 2], 11: [0, 1], 12: [0, 1, 2]}
    # Each member's first event carries the placement, as a lone trial's does.
    assert [e.member for e in sent if e.assigned is not None] == [10, 11, 12]
    assert ends[10].outcome is Outcome.COMPLETE
    assert ends[10].metrics == {"score": 1.0}
    assert ends[11].outcome is Outcome.PRUNED
    assert ends[11].end is not None
    assert ends[11].end.reason == "too large"
    assert ends[12].outcome is Outcome.PRUNED
    assert ends[12].end is not None
    assert ends[12].end.reason == "asked at step 2"
    assert all(end.kind is EventKind.END and end.assigned == HERE for end in ends.values())


def test_a_group_that_raises_fails_every_open_member_with_the_traceback() -> None:
    _, ends = _run([{"x": 0.1, "fail": True}, {"x": 0.2, "fail": True}])
    assert [e.outcome for e in ends.values()] == [Outcome.FAIL, Outcome.FAIL]
    assert all("RuntimeError: the group broke" in e.error for e in ends.values())


def test_a_group_out_of_memory_is_split_down_to_members_alone_then_charged() -> None:
    # Before any report: split in halves, run one after the other; alone, each is charged.
    too_big = {"oom": True, "oom_alone": True}
    _, ends = _run([{"x": 0.1, **too_big}, {"x": 0.2, **too_big}])
    for end in ends.values():
        assert end.outcome is Outcome.PRUNED
        assert end.end is not None
        assert end.end.fused_oom_at == 2  # the driver learns the shape's limit
        assert end.end.oom is not None
        assert end.end.oom.message.startswith("CUDA out of memory")


def test_a_group_out_of_memory_after_reporting_is_not_charged_to_its_members() -> None:
    _, ends = _run([{"x": 0.1, "oom_late": True}, {"x": 0.2, "oom_late": True}])
    for end in ends.values():
        assert end.outcome is Outcome.PRUNED
        assert end.end is not None
        assert end.end.oom is None
        assert end.end.reason.startswith("the fused group of 2 ran out of memory: CUDA out")


def test_only_the_members_that_ran_out_alone_are_charged_after_a_split() -> None:
    # Member 11 fits alone; member 10 does not.
    _, ends = _run([{"x": 0.1, "oom": True, "oom_alone": True}, {"x": 0.2, "oom": True}])
    assert ends[10].outcome is Outcome.PRUNED
    assert ends[10].end is not None
    assert ends[10].end.oom is not None
    assert ends[11].outcome is Outcome.COMPLETE
    assert ends[11].end is not None
    assert ends[11].end.oom is None
    assert ends[11].end.fused_oom_at == 2


def test_one_value_per_member_is_asked_of_what_the_function_returns() -> None:
    _, ends = _run([{"x": 0.1, "wrong_return": True}, {"x": 0.2, "wrong_return": True}])
    assert all(e.outcome is Outcome.FAIL for e in ends.values())
    assert "one value per member (2)" in ends[10].error


def test_a_function_that_takes_no_members_fails_each_member_with_the_reason() -> None:
    launch = make_launch({}, members=[{"x": 1}], fused_train="tests.train_functions:quick")
    [end] = execute_group(launch, assigned=HERE, send=lambda e: None)
    assert end.outcome is Outcome.FAIL
    assert "cannot be called as train(members)" in end.error


def test_a_members_function_that_exits_0_returns_and_one_that_exits_1_fails_them_all() -> None:
    _, ends = _run([{"x": 0.1, "exit": 0}, {"x": 0.2, "exit": 0}])
    assert [e.outcome for e in ends.values()] == [Outcome.COMPLETE, Outcome.COMPLETE]
    _, ends = _run([{"x": 0.1, "exit": 1}, {"x": 0.2, "exit": 1}])
    assert [e.outcome for e in ends.values()] == [Outcome.FAIL, Outcome.FAIL]
    assert all(e.error.startswith("fusion.train called sys.exit(1): ") for e in ends.values())
