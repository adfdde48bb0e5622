"""Running a fused launch in a worker: one call of the members function, an end per member.

:func:`execute_group` is :func:`~hpsearch.worker.execute_trial` for a launch
of several trials (``fusion``): each member gets its own context, whose events
name it (``WorkerEvent.member``), and its own end event. Nothing after the
ledger needs to know its trials were fused.

A group that runs out of memory ends its open members pruned with the reason,
without an OOM record: the OOM book learns what one trial of a shape needs, and
a group's need is not a member's (it is never charged an OOM it did not cause).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from hpsearch.adapters import Member, install_pickles, resolve_train_function
from hpsearch.oom import OomReport, device_oom
from hpsearch.tracking import end_open_runs
from hpsearch.trial.context import (
    DeviceMemory,
    PruneOracle,
    TrialContext,
    TrialIdentity,
    TrialPruned,
)
from hpsearch.trial.protocol import (
    Assignment,
    EndReport,
    EventKind,
    Outcome,
    TrialLaunch,
    WorkerEvent,
)
from hpsearch.trial.seeds import seed_everything
from hpsearch.worker._exits import exit_failure
from hpsearch.worker._threads import with_thread_hint
from hpsearch.worker._trial import (
    Sender,
    WorkerChannel,
    apply_memory_cap,
    device_of,
    final_metrics,
    gpu_memory_of,
    limit_torch_threads,
    release_memory,
    surroundings,
)


def execute_group(
    launch: TrialLaunch,
    *,
    assigned: Assignment,
    send: WorkerChannel,
    oracle_for: Callable[[int], PruneOracle] | None = None,
) -> list[WorkerEvent]:
    """Run ``fusion.train(members)`` for the launch's trials; their end events (not yet sent).

    Args:
        launch: the fused trials and their settings, from the driver.
        assigned: where the worker runs.
        send: where each member's reports and declarations go while it runs.
        oracle_for: answers ``should_prune()`` for a member's number (``None``: never).
    """
    settings = launch.settings
    try:
        install_pickles(settings.by_value)
        train = resolve_train_function(
            settings.fused_train, source=settings.source, key="fusion.train", members=True
        )
        limit_torch_threads(launch.admission.cpus)
    except Exception:
        error = traceback.format_exc()
        return [_end(spec.number, Outcome.FAIL, error, {}, assigned) for spec in launch.members]
    device = device_of(assigned)
    memory = DeviceMemory(
        gpu_memory_of(device, assigned, settings.gpu_memory_mb), apply_memory_cap(launch, device)
    )
    resources = {k: v for k, v in (("CPU", assigned.cpus), ("GPU", assigned.gpus)) if v is not None}
    members = [
        Member(
            dict(spec.params),
            TrialContext(
                trial=TrialIdentity(spec.number, spec.seed, spec.checkpoint_dir),
                device=device,
                channel=Sender(send, assigned, member=spec.number),
                prune_oracle=oracle_for(spec.number) if oracle_for is not None else None,
                resources=resources,
                memory=memory,
            ),
        )
        for spec in launch.members
    ]
    values: dict[int, Any] = {}
    with surroundings(launch):
        _call(train, members, list(launch.members), values, device)
        ends = [
            _member_end(member, spec.number, values.get(spec.number), settings.objectives, assigned)
            for member, spec in zip(members, launch.members, strict=True)
        ]
        # One process, one set of runs for the group: failed only where every member failed.
        failed = all(end.outcome is Outcome.FAIL for end in ends)
        end_open_runs((Outcome.FAIL if failed else Outcome.COMPLETE).run_status)
    return ends


def _call(
    train: Callable[..., Any],
    members: list[Member],
    specs: list[Any],
    values: dict[int, Any],
    device: str,
) -> None:
    """Call the members function; put what it returned per member's number in ``values``.

    A ``TrialPruned`` of the function prunes every open member; out of memory is
    :func:`_out_of_memory`'s; another exception fails every open member with
    the traceback.
    """
    try:
        seed_everything(specs[0].seed)
        try:
            returned = train(members)
        except SystemExit as exited:
            failure = exit_failure(exited, "fusion.train")
            if failure is not None:
                for member in members:
                    member.fail(failure)
                return
            returned = None  # sys.exit(0): the function's end
    except TrialPruned as pruned:
        for member in members:
            member.prune(str(pruned))
        return
    except Exception as exc:
        kind = device_oom(exc)
        if kind is None:
            error = with_thread_hint(traceback.format_exc(), exc)
            for member in members:
                member.fail(error)
            return
        message = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        del exc  # its traceback holds the failed frames' tensors
        release_memory(device)
        _out_of_memory(train, members, specs, values, device=device, oom=OomReport(kind, message))
        return
    _take(returned, members, specs, values)


def _out_of_memory(
    train: Callable[..., Any],
    members: list[Member],
    specs: list[Any],
    values: dict[int, Any],
    *,
    device: str,
    oom: OomReport,
) -> None:
    """A group ran out of memory: split it, or end its members pruned.

    Before any member reported, the group is split in two halves, run one after
    the other, down to single members; its members carry its size
    (``Member.fused_oom_at``) for the driver to learn the shape's limit. A member
    alone that runs out is charged, as a trial is. A group that runs out later
    ends its open members pruned, not charged (the OOM book learns what one
    trial of a shape needs, and a group's need is not a member's).
    """
    if len(members) == 1:
        member = members[0]
        member.oom = replace(oom, step=member.ctx.last_step)
        member.prune(f"out of memory: {oom.message}")
    elif all(m.active and m.ctx.last_step is None for m in members):
        half = len(members) // 2
        for part in (slice(0, half), slice(half, None)):
            _call(train, members[part], specs[part], values, device)
        for member in members:
            member.fused_oom_at = max(len(members), member.fused_oom_at or 0)
    else:
        for member in members:
            member.prune(f"the fused group of {len(members)} ran out of memory: {oom.message}")


def _take(returned: Any, members: list[Member], specs: list[Any], values: dict[int, Any]) -> None:
    """What the function returned: ``None``, or one value per member, in their order."""
    if returned is None:
        return
    if not isinstance(returned, Sequence) or len(returned) != len(members):
        error = (
            f"the members function returned {type(returned).__name__}; return None, or one "
            f"value per member ({len(members)}), in the members' order"
        )
        for member in members:
            member.fail(error)
        return
    for spec, value in zip(specs, returned, strict=True):
        values[spec.number] = value


def _member_end(
    member: Member,
    number: int,
    returned: Any,
    objectives: Sequence[str],
    assigned: Assignment,
) -> WorkerEvent:
    """The end event of one member: as it ended itself, or complete with what was returned."""
    if member.active:
        try:
            member.complete(**final_metrics(returned, objectives))
        except (TypeError, ValueError):
            member.fail(traceback.format_exc())
    assert member.outcome is not None
    metrics = {**member.final}
    end = EndReport(
        reason=member.reason if member.outcome is Outcome.PRUNED else "",
        oom=member.oom,
        fused_oom_at=member.fused_oom_at,
        stop_search=member.ctx.stop_asked,
    )
    return _end(number, member.outcome, member.reason, metrics, assigned, end=end)


def _end(
    number: int,
    outcome: Outcome,
    reason: str,
    metrics: dict[str, float],
    assigned: Assignment,
    *,
    end: EndReport | None = None,
) -> WorkerEvent:
    pruned = outcome is Outcome.PRUNED
    return WorkerEvent(
        kind=EventKind.END,
        member=number,
        outcome=outcome,
        error="" if pruned else reason,
        metrics=metrics,
        assigned=assigned,
        end=end or EndReport(reason=reason if pruned else ""),
    )
