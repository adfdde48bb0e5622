"""A runner in simulated time: modelled trials on a virtual clock, no Ray and no sleeping.

Syne Tune's simulator backend is the model: every production part of a search
runs as it does under Ray Tune (the scheduler and its resource policy, the
packing policy, Optuna's sampler and pruner, the out-of-memory book, the
ledger and its listeners, MLflow, the GPU monitor reading a simulated GPU),
while the trials themselves are played from a :class:`~hpsearch.trial.plan.TrialModel`
on a discrete-event clock. Hundreds of trials take seconds.

Use it as ``hpsearch.run(config, runner=SimulatedRunner())`` with a config
whose ``train`` is the simulated GPU workload (its plan is the default model)
and whose telemetry is ``simulated``.

A fused launch (``fusion``) is played as ``trial.group`` runs one in a worker:
one process whose members' plans make a :class:`~hpsearch.simulation.GroupPlan`
(one context, the sharing model's fused slowdown for the members still
training); members that are pruned leave it, and a group that runs out of
memory before any report is split in halves, played one after the other.
Every member ends when the whole launch does, as in a worker.
"""

from __future__ import annotations

import heapq
import itertools
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from hpsearch.config import ExecutionSpec, RunConfig
from hpsearch.errors import ConfigError, HpsearchError
from hpsearch.oom import BatchRetry, OomReport, retry_smaller
from hpsearch.placement import ClusterCapacity, NodeGpus
from hpsearch.pruning import LocalVerdictBoard, VerdictBoard
from hpsearch.runner._base import RunnerSession, TrialEvents, TrialRunner, TrialSource
from hpsearch.scheduler import Hold
from hpsearch.simulation import (
    CUDA_CONTEXT_MB,
    GroupPlan,
    SharingModel,
    SimulatedSpec,
    TrialModel,
    TrialPlan,
    cpu_rate,
)
from hpsearch.telemetry import GpuDemand, GpuMonitor, solo_name
from hpsearch.trial.protocol import (
    Assignment,
    EndReport,
    EventKind,
    MemberSpec,
    Outcome,
    TrialLaunch,
    WorkerEvent,
)

SIMULATED_NODE = "simulated-node"
"""The node id of the simulated machine."""
ELSEWHERE_POLL_S = 0.5
"""Wall seconds between looks, while only trials running elsewhere can end."""
MODELLED_TRAIN = "hpsearch.workloads.simulated_gpu:train"
"""The workload whose trials the simulated runner plays by default (its ``plan`` is the model)."""
MODELLED_MEMBERS = "hpsearch.workloads.simulated_gpu:train_members"
"""That workload's members function, for fused searches (its members' plans are the model)."""


class VirtualClock:
    """Unix time that moves only when the simulation says so."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class SimulatedRunner(TrialRunner):
    """Plays modelled trials on a virtual clock, on one simulated node.

    Args:
        model: predicts each trial (default: ``hpsearch.workloads.simulated_gpu.plan``).
        cpus: the node's CPUs when ``execution.num_cpus`` is not set.
        tick_s: virtual seconds between ticks: upkeep, and asking the scheduler again when
            time alone may have made room (a packing probe, a cool-down).
        stall_s: virtual seconds with nothing running and nothing admitted after
            which the search is stuck (an error, not an endless loop).
    """

    def __init__(
        self,
        model: TrialModel | None = None,
        *,
        cpus: int = 8,
        tick_s: float = 5.0,
        stall_s: float = 3600.0,
    ) -> None:
        self._modelled_train = MODELLED_TRAIN if model is None else None
        if model is None:
            from hpsearch.workloads.simulated_gpu import plan

            model = plan
        self._model = model
        self._cpus = cpus
        self._tick_s = tick_s
        self._stall_s = stall_s

    def check(self, config: RunConfig) -> None:
        """Refuse a config whose ``train`` (or ``fusion.train``) is not the workload modelled."""
        wanted = self._modelled_train
        if wanted is None:
            return
        if config.train_target != wanted:
            train = config.train_label
            raise ConfigError(
                config.source,
                "train",
                f"the simulated runner plays modelled trials of {wanted}, not {train}",
                f"run it on Ray (--runner ray), or set train: {wanted}",
            )
        if config.fusion.mode != "off" and config.fusion.train != MODELLED_MEMBERS:
            raise ConfigError(
                config.source,
                "fusion.train",
                f"the simulated runner plays fused groups of {MODELLED_MEMBERS}, "
                f"not {config.fusion.train}",
                f"run it on Ray (--runner ray), or set fusion.train: {MODELLED_MEMBERS}",
            )

    @contextmanager
    def connect(
        self, execution: ExecutionSpec, workdir: str, simulated: SimulatedSpec | None = None
    ) -> Iterator[RunnerSession]:
        spec = simulated or SimulatedSpec()
        gpus = _SimulatedGpus(
            spec.memory_total_mb if simulated is not None else None,
            SharingModel(spec.sharing),
        )
        capacity = ClusterCapacity(
            float(execution.num_cpus or self._cpus), float(execution.num_gpus or 0)
        )
        yield _SimulatedSession(
            self._model, capacity, gpus, tick_s=self._tick_s, stall_s=self._stall_s
        )


@dataclass
class _Member:
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
class _Trial:
    """A launch being played (a trial, or a fused group): its plan, and how far into its
    current phase it is."""

    trial_id: str
    launch: TrialLaunch
    assigned: Assignment
    params: dict[str, Any]
    plan: TrialPlan | None = None
    # A fused launch: its members, the parts still to run (halves after an out of
    # memory), the part running now and its plan.
    members: list[_Member] = field(default_factory=list)
    parts: list[list[_Member]] = field(default_factory=list)
    part: list[_Member] = field(default_factory=list)
    group: GroupPlan | None = None
    next_epoch: int = 0
    last_step: int | None = None
    retries: list[BatchRetry] = field(default_factory=list)
    placed: bool = False
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


class _SimulatedSession(RunnerSession):
    def __init__(
        self,
        model: TrialModel,
        capacity: ClusterCapacity,
        gpus: _SimulatedGpus,
        *,
        tick_s: float,
        stall_s: float,
    ) -> None:
        self.clock: Callable[[], float] = VirtualClock(time.time())
        self.local_node_id = SIMULATED_NODE
        self._virtual = self.clock
        self._model = model
        self._capacity = capacity
        self._gpus = gpus
        self._tick_s = tick_s
        self._stall_s = stall_s
        self._board = LocalVerdictBoard()
        self._monitor: GpuMonitor | None = None
        self._queue: list[tuple[float, int, bool, Callable[[], None]]] = []
        self._order = itertools.count()
        self._pids = itertools.count(10_000)
        self._running: dict[str, _Trial] = {}
        self._events: TrialEvents | None = None

    # -- the session -------------------------------------------------------------

    def capacity(self) -> ClusterCapacity:
        return self._capacity

    def gpu_nodes(self, monitored: Mapping[str, Mapping[int, float | None]]) -> list[NodeGpus]:
        count = int(self._capacity.gpus)
        if count <= 0:
            return []
        indices = tuple(range(count))
        local_gpus = monitored.get(SIMULATED_NODE, monitored.get(""))
        known = local_gpus is not None and all(i in local_gpus for i in indices)
        memory = {i: (local_gpus or {}).get(i) for i in indices}
        return [NodeGpus(SIMULATED_NODE, "127.0.0.1", self._capacity.cpus, indices, memory, known)]

    def verdict_board(self) -> VerdictBoard:
        return self._board

    def sampling(self, monitor: GpuMonitor) -> AbstractContextManager[GpuMonitor]:
        self._monitor = monitor  # sampled on the virtual clock, not by its thread
        return nullcontext(monitor)

    def run(self, source: TrialSource, events: TrialEvents, *, name: str, max_pending: int) -> None:
        self._events = events
        ids = (f"sim_{n}" for n in itertools.count())
        self._at(self._now(), self._tick)
        if self._monitor is not None:
            self._at(self._now(), self._sample, quiet=True)
        finished, changed, elsewhere = False, True, False
        idle_since: float | None = None
        while True:
            while changed and not finished:
                trial_id = next(ids)
                answer = source.suggest(trial_id)
                elsewhere = answer is Hold.ELSEWHERE
                if answer is Hold.FINISHED:
                    finished = True
                elif isinstance(answer, Hold):
                    break
                else:
                    self._launch(trial_id, answer)
            if finished and (not self._running or source.overdue()):
                return  # trials left running are the caller's to record as interrupted
            if elsewhere and not self._running:
                # Only trials running elsewhere can end now, in wall time (a dead
                # driver's, once its heartbeat runs out): wait for them in wall time.
                time.sleep(ELSEWHERE_POLL_S)
                self._live().maintain()
                idle_since, changed = None, True
                continue
            if self._running:
                idle_since = None
            elif idle_since is None:
                idle_since = self._now()
            elif self._now() - idle_since > self._stall_s:
                raise HpsearchError(
                    f"simulated search '{name}' stalled: nothing ran or was admitted for "
                    f"{self._stall_s:g} simulated seconds"
                )
            changed = self._advance()

    # -- the event queue -----------------------------------------------------------

    def _now(self) -> float:
        return self._virtual()

    def _at(self, when: float, action: Callable[[], None], *, quiet: bool = False) -> None:
        """Run ``action`` at ``when``; a quiet one (a GPU sample) cannot make room for a trial."""
        heapq.heappush(self._queue, (when, next(self._order), quiet, action))

    def _advance(self) -> bool:
        """Run the next scheduled action, moving the clock; whether it may have made room."""
        when, _, quiet, action = heapq.heappop(self._queue)
        assert isinstance(self._virtual, VirtualClock)
        self._virtual.now = max(self._virtual.now, when)
        action()
        return not quiet

    def _tick(self) -> None:
        self._live().maintain()  # on the wall clock: heartbeats are real
        self._at(self._now() + self._tick_s, self._tick)

    def _sample(self) -> None:
        assert self._monitor is not None
        self._monitor.sample_now()
        self._at(self._now() + self._monitor.interval_s, self._sample, quiet=True)

    def _live(self) -> TrialEvents:
        if self._events is None:
            raise RuntimeError("the simulated session is not running")
        return self._events

    # -- trials --------------------------------------------------------------------

    def _launch(self, launch_id: str, launch: TrialLaunch) -> None:
        gpus = launch.ray_gpus
        assigned = Assignment(
            cpus=launch.admission.cpus,
            gpus=gpus if gpus > 0 else None,
            gpu_ids=self._gpu_ids(launch),
            node_id=SIMULATED_NODE,
            pid=next(self._pids),
        )
        first = launch.members[0]
        trial = _Trial(launch_id, launch, assigned, dict(first.params))
        self._running[launch_id] = trial
        self._live().started(launch_id)
        if len(launch.members) > 1:
            trial.members = [_Member(spec) for spec in launch.members]
            trial.parts = [list(trial.members)]
            self._next_part(trial)
        else:
            self._begin(trial, trial.params)

    def _gpu_ids(self, launch: TrialLaunch) -> tuple[str, ...]:
        """The policy's GPU; else, as Ray fills a node's GPUs, the first with room for its share.

        The packing policy always names the GPU; a policy that leaves it to Ray (a
        static count per GPU) gets Ray's choice, which is what this plays.
        """
        share = launch.admission.gpus
        if launch.admission.gpu_index is not None:
            return (str(launch.admission.gpu_index),)
        if share <= 0:
            return ()
        used: dict[str, float] = {}
        for other in self._running.values():
            for gpu in other.assigned.gpu_ids:
                used[gpu] = used.get(gpu, 0.0) + other.launch.admission.gpus
        for index in range(int(self._capacity.gpus)):
            if used.get(str(index), 0.0) + share <= 1.0 + 1e-9:
                return (str(index),)
        return ("0",)

    def _send(self, trial: _Trial, event: WorkerEvent) -> None:
        if not trial.placed:  # the first event carries the placement, as a worker's does
            event = replace(event, assigned=trial.assigned)
            trial.placed = True
        self._live().event(trial.trial_id, event)

    def _begin(self, trial: _Trial, params: dict[str, Any]) -> None:
        """Start (or, after a smaller-batch retry, restart) the trial's plan now."""
        try:
            plan = self._model(params, self._memory_left(trial), trial.launch.memory_cap_mb)
        except Exception:
            # As a worker's train raising: the trial fails with its traceback.
            self._end(trial, Outcome.FAIL, error=traceback.format_exc())
            return
        trial.plan, trial.next_epoch = plan, 0
        if plan.load is not None:
            self._send(trial, WorkerEvent(kind=EventKind.GPU_LOAD, gpu_load=plan.load))
        if plan.oom is not None:
            self._phase(trial, plan.oom_after_s, lambda: self._ran_out(trial, params))
        elif plan.epochs:
            self._phase(trial, plan.epochs[0].seconds, lambda: self._epoch(trial))
        else:
            self._end(trial, Outcome.COMPLETE)

    def _memory_left(self, trial: _Trial) -> float | None:
        """What the trial's GPU leaves it: its memory less what the others on it hold."""
        total = self._gpus.memory_total_mb
        if trial.gpu is None or total is None:
            return None
        held = sum(
            other.plan.load.memory_mb
            for other in self._running.values()
            if other is not trial and other.gpu == trial.gpu and other.plan and other.plan.load
        )
        return total - held

    def _epoch(self, trial: _Trial) -> None:
        assert trial.plan is not None
        step = trial.next_epoch
        planned = trial.plan.epochs[step]
        trial.last_step = step
        metrics = planned.slowed(self._now() - trial.started)  # what the trial measured
        self._send(trial, WorkerEvent(kind=EventKind.REPORT, step=step, metrics=metrics))
        if self._board.verdict(trial.launch.trial.number, step):
            self._end(trial, Outcome.PRUNED, EndReport(reason=f"pruned after epoch {step}"))
        elif step + 1 < len(trial.plan.epochs):
            trial.next_epoch = step + 1
            following = trial.plan.epochs[step + 1]
            self._phase(trial, following.seconds, lambda: self._epoch(trial))
        else:
            self._end(trial, Outcome.COMPLETE)

    def _ran_out(self, trial: _Trial, params: dict[str, Any]) -> None:
        assert trial.plan is not None
        assert trial.plan.oom is not None
        oom = replace(trial.plan.oom, step=trial.last_step)
        retry = retry_smaller(params, trial.launch.settings.oom, trial.retries, oom.step)
        if retry is None:
            self._end(trial, Outcome.PRUNED, EndReport(oom=oom, retries=tuple(trial.retries)))
            return
        smaller, record = retry
        trial.retries.append(record)
        self._begin(trial, smaller)

    def _end(
        self, trial: _Trial, outcome: Outcome, end: EndReport | None = None, error: str = ""
    ) -> None:
        report = end or EndReport(retries=tuple(trial.retries))
        ended = WorkerEvent(kind=EventKind.END, outcome=outcome, error=error, end=report)
        self._send(trial, ended)
        trial.done = None
        del self._running[trial.trial_id]
        self._live().ended(trial.trial_id)
        self._rerate()  # the others run faster now

    # -- fused launches --------------------------------------------------------------

    def _send_member(self, trial: _Trial, member: _Member, event: WorkerEvent) -> None:
        if not member.placed:  # each member's first event carries the placement
            event = replace(event, assigned=trial.assigned)
            member.placed = True
        self._live().event(trial.trial_id, replace(event, member=member.spec.number))

    def _next_part(self, trial: _Trial) -> None:
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
        limit = _least(self._memory_left(trial), trial.launch.memory_cap_mb)
        group = trial.group = GroupPlan(plans, limit, context, self._gpus.sharing)
        trial.plan = TrialPlan(load=group.load(), cpus=group.cpus)
        if trial.plan.load is not None:
            load_event = WorkerEvent(kind=EventKind.GPU_LOAD, gpu_load=trial.plan.load)
            self._send_member(trial, part[0], load_event)
        if group.oom is not None:
            self._phase(trial, group.oom_after_s, lambda: self._group_ran_out(trial))
        elif plans[0].epochs:
            self._group_phase(trial, 0)
        else:
            self._next_part(trial)

    def _group_phase(self, trial: _Trial, epoch: int) -> None:
        """Play the part's ``epoch`` at the fused speed of the members still training."""
        assert trial.group is not None
        assert trial.plan is not None
        training = sum(m.active for m in trial.part)
        trial.plan = replace(trial.plan, load=trial.group.load(training))
        solo = trial.group.plans[0].epochs[epoch].seconds
        seconds = solo * trial.group.slowdown(training)
        self._phase(trial, seconds, lambda: self._group_epoch(trial, epoch))

    def _group_epoch(self, trial: _Trial, epoch: int) -> None:
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

    def _group_ran_out(self, trial: _Trial) -> None:
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

    def _end_group(self, trial: _Trial) -> None:
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

    # -- how fast each trial runs ----------------------------------------------------

    def _phase(self, trial: _Trial, solo_seconds: float, done: Callable[[], None]) -> None:
        """Run ``solo_seconds`` of the trial's own work, then ``done`` (slower when shared)."""
        now = self._now()
        trial.remaining, trial.started, trial.since = solo_seconds, now, now
        trial.rate, trial.done = 0.0, done
        self._rerate()

    def _rerate(self) -> None:
        """Settle every running trial's progress, then give each its speed under sharing."""
        now = self._now()
        busy = [t for t in self._running.values() if t.done is not None]
        for trial in busy:
            trial.remaining = max(0.0, trial.remaining - trial.rate * (now - trial.since))
            trial.since = now
        rates = self._gpus.rates(busy, self._capacity.cpus)
        for trial in busy:
            rate = rates[trial.trial_id]
            if rate == trial.rate:
                continue  # its completion is already scheduled at this speed
            trial.rate = rate
            trial.version += 1
            self._at(now + trial.remaining / rate, self._finisher(trial, trial.version))

    def _finisher(self, trial: _Trial, version: int) -> Callable[[], None]:
        """The end of the trial's phase, if it is still due then (not rescheduled since)."""

        def finish() -> None:
            if version != trial.version or trial.done is None:
                return
            done, trial.done = trial.done, None
            trial.remaining, trial.rate = 0.0, 0.0
            done()

        return finish


@dataclass(frozen=True)
class _SimulatedGpus:
    """The simulated machine's GPUs as the runner plays them: their memory and sharing."""

    memory_total_mb: float | None
    sharing: SharingModel

    def rates(self, trials: list[_Trial], cores: float) -> dict[str, float]:
        """Each trial's speed, a share of its solo speed: its GPU's sharing, the node's CPUs."""
        by_gpu: dict[str | None, list[_Trial]] = {}
        for trial in trials:
            by_gpu.setdefault(trial.gpu, []).append(trial)
        host = cpu_rate(cores, [t.plan.cpus if t.plan else 1.0 for t in trials])
        rates: dict[str, float] = {}
        for gpu, here in by_gpu.items():
            if gpu is None:
                rates.update((t.trial_id, host) for t in here)
                continue
            demands = [_demand(t) for t in here]
            for trial, rate in zip(here, self.sharing.gpu_rates(demands), strict=True):
                rates[trial.trial_id] = rate * host
        return rates


def _least(*limits: float | None) -> float | None:
    known = [limit for limit in limits if limit is not None]
    return min(known) if known else None


def _demand(trial: _Trial) -> GpuDemand:
    load = trial.plan.load if trial.plan is not None else None
    if load is None:
        return GpuDemand(0.0)
    return GpuDemand(load.utilization_pct, load.sm_share)
