"""The simulated runner's launches, and how it plays a fused one (``fusion``).

A fused launch is played as ``trial.group`` runs one in a worker: one process
whose members' plans make a :class:`~hpsearch.simulation.GroupPlan` (one context,
the sharing model's fused slowdown for the members still training); members that
are pruned leave it, and a group that runs out of memory before any report is
split in halves, played one after the other. Every member ends when the whole
launch does, as in a worker. :class:`FusedPlay` holds that play;
:class:`~hpsearch.runner.SimulatedRunner`'s session plays the rest.
"""

from __future__ import annotations

import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from hpsearch.oom import BatchRetry, OomReport
from hpsearch.pruning import LocalVerdictBoard
from hpsearch.runner._base import TrialEvents
from hpsearch.simulation import (
    CUDA_CONTEXT_MB,
    GroupPlan,
    SharingModel,
    TrialModel,
    TrialPlan,
    tightest_limit,
)
from hpsearch.telemetry import solo_name
from hpsearch.trial.protocol import (
    Assignment,
    EndReport,
    EventKind,
    MemberSpec,
    Outcome,
    TrialLaunch,
    WorkerEvent,
)


@dataclass
class PlayedMember:
    """One trial of a fused launch being played: its plan, and how it ended."""

    spec: MemberSpec
    plan: TrialPlan | None = None
    outcome: Outcome | None = None
    reason: str = ""
    oom: OomReport | None = None
    fused_oom_at: int | None = None
    reported: bool = False
    placed: bool = False

    @property
    def active(self) -> bool:
        return self.outcome is None

    def end(self, outcome: Outcome, reason: str = "") -> None:
        if self.outcome is None:
            self.outcome, self.reason = outcome, reason


@dataclass
class Played:
    """A launch being played (a trial, or a fused group): its plan, and how far into its
    current phase it is."""

    trial_id: str
    launch: TrialLaunch
    assigned: Assignment
    params: dict[str, Any]
    plan: TrialPlan | None = None
    # A fused launch: its members, the parts still to run (halves after an out of
    # memory), the part running now and its plan.
    members: list[PlayedMember] = field(default_factory=list)
    parts: list[list[PlayedMember]] = field(default_factory=list)
    part: list[PlayedMember] = field(default_factory=list)
    group: GroupPlan | None = None
    next_epoch: int = 0
    last_step: int | None = None
    retries: list[BatchRetry] = field(default_factory=list)
    placed: bool = False
    cold: bool = False
    """Its worker process is new: its first plan starts with the plan's ``cold_start_s``."""
    # The current phase (an epoch, or the run-up to an OOM): solo seconds left,
    # the speed it runs at now, since when, and what happens when it is done.
    remaining: float = 0.0
    rate: float = 0.0
    since: float = 0.0
    started: float = 0.0
    version: int = 0
    done: Callable[[], None] | None = None

    @property
    def gpu(self) -> str | None:
        return self.assigned.gpu_ids[0] if self.assigned.gpu_ids else None


class FusedPlay(ABC):
    """The simulated session's play of fused launches (see the module)."""

    _model: TrialModel
    _board: LocalVerdictBoard
    _running: dict[str, Played]

    @abstractmethod
    def _now(self) -> float: ...

    @abstractmethod
    def _live(self) -> TrialEvents: ...

    @abstractmethod
    def _sharing(self) -> SharingModel: ...

    @abstractmethod
    def _memory_left(self, trial: Played) -> float | None: ...

    @abstractmethod
    def _phase(self, trial: Played, solo_seconds: float, done: Callable[[], None]) -> None: ...

    @abstractmethod
    def _rerate(self) -> None: ...

    def _send_member(self, trial: Played, member: PlayedMember, event: WorkerEvent) -> None:
        if not member.placed:  # each member's first event carries the placement
            event = replace(event, assigned=trial.assigned)
            member.placed = True
        self._live().event(trial.trial_id, replace(event, member=member.spec.number))

    def _next_part(self, trial: Played) -> None:
        """Play the launch's next part (the whole group, or a half after an OOM), or end it."""
        if not trial.parts:
            self._end_group(trial)
            return
        part = trial.part = trial.parts.pop(0)
        try:
            left, cap = self._memory_left(trial), trial.launch.memory_cap_mb
            plans = tuple(self._model(dict(m.spec.params), left, cap) for m in part)
        except Exception:
            error = traceback.format_exc()
            for member in part:
                member.end(Outcome.FAIL, error)
            self._next_part(trial)
            return
        for member, planned in zip(part, plans, strict=True):
            member.plan = planned
        context = float(part[0].spec.params.get("context_mb", CUDA_CONTEXT_MB))
        limit = tightest_limit(self._memory_left(trial), trial.launch.memory_cap_mb)
        group = trial.group = GroupPlan(plans, limit, context, self._sharing())
        trial.plan = TrialPlan(load=group.load(), cpus=group.cpus)
        if trial.plan.load is not None:
            load_event = WorkerEvent(kind=EventKind.GPU_LOAD, gpu_load=trial.plan.load)
            self._send_member(trial, part[0], load_event)
        if trial.cold and plans[0].cold_start_s > 0:
            trial.cold = False
            self._phase(trial, plans[0].cold_start_s, lambda: self._play_part(trial))
        else:
            self._play_part(trial)

    def _play_part(self, trial: Played) -> None:
        """The part's run-up to an out of memory, or its first epoch."""
        group = trial.group
        assert group is not None
        if group.oom is not None:
            self._phase(trial, group.oom_after_s, lambda: self._group_ran_out(trial))
        elif group.plans[0].epochs:
            self._group_phase(trial, 0)
        else:
            self._next_part(trial)

    def _group_phase(self, trial: Played, epoch: int) -> None:
        """Play the part's ``epoch`` at the fused speed of the members still training."""
        assert trial.group is not None
        assert trial.plan is not None
        training = sum(m.active for m in trial.part)
        trial.plan = replace(trial.plan, load=trial.group.load(training))
        solo = trial.group.plans[0].epochs[epoch].seconds
        seconds = solo * trial.group.slowdown(training)
        self._phase(trial, seconds, lambda: self._group_epoch(trial, epoch))

    def _group_epoch(self, trial: Played, epoch: int) -> None:
        """Each training member reports the epoch (slowed as the group was), then the next."""
        took = self._now() - trial.started
        for member in trial.part:
            if not member.active or member.plan is None:
                continue
            mine = member.plan.epochs[epoch]
            twins = {solo_name(name): mine.metrics[name] for name in mine.speeds + mine.durations}
            metrics = {**mine.slowed(took), **twins}
            report = WorkerEvent(kind=EventKind.REPORT, step=epoch, metrics=metrics)
            self._send_member(trial, member, report)
            member.reported = True
            if self._board.verdict(member.spec.number, epoch):
                member.end(Outcome.PRUNED, f"pruned after epoch {epoch}")
        assert trial.group is not None
        if any(m.active for m in trial.part) and epoch + 1 < len(trial.group.plans[0].epochs):
            self._group_phase(trial, epoch + 1)
            return
        for member in trial.part:
            member.end(Outcome.COMPLETE)
        self._next_part(trial)

    def _group_ran_out(self, trial: Played) -> None:
        """The part ran out of memory: split it before any report, else prune its members."""
        assert trial.group is not None
        assert trial.group.oom is not None
        oom, part = trial.group.oom, trial.part
        if len(part) == 1:
            part[0].oom = oom
            part[0].end(Outcome.PRUNED, f"out of memory: {oom.message}")
        elif not any(m.reported for m in part):
            half = len(part) // 2
            trial.parts[:0] = [part[:half], part[half:]]
            for member in part:
                member.fused_oom_at = max(len(part), member.fused_oom_at or 0)
        else:
            for member in part:
                member.end(
                    Outcome.PRUNED,
                    f"the fused group of {len(part)} ran out of memory: {oom.message}",
                )
        self._next_part(trial)

    def _end_group(self, trial: Played) -> None:
        """Every member's end, as a worker sends them when the members function returns."""
        for member in trial.members:
            outcome = member.outcome or Outcome.COMPLETE
            pruned = outcome is Outcome.PRUNED
            end = EndReport(
                reason=member.reason if pruned else "",
                oom=member.oom,
                fused_oom_at=member.fused_oom_at,
            )
            ended = WorkerEvent(
                kind=EventKind.END,
                outcome=outcome,
                error="" if pruned else member.reason,
                end=end,
            )
            self._send_member(trial, member, ended)
        trial.done = None
        del self._running[trial.trial_id]
        self._live().ended(trial.trial_id)
        self._rerate()
