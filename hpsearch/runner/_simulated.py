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

A fused launch (``fusion``) is played as a worker runs one
(:mod:`hpsearch.runner._simulated_play`).
"""

from __future__ import annotations

import heapq
import itertools
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

from hpsearch.config import ExecutionSpec, RunConfig
from hpsearch.errors import ConfigError, HpsearchError
from hpsearch.oom import retry_smaller
from hpsearch.placement import ClusterCapacity, NodeGpus
from hpsearch.pruning import LocalVerdictBoard, VerdictBoard
from hpsearch.runner._base import RunnerSession, TrialEvents, TrialRunner, TrialSource
from hpsearch.runner._simulated_play import FusedPlay, Played, PlayedMember
from hpsearch.scheduler import Hold
from hpsearch.simulation import (
    SharingModel,
    SimulatedSpec,
    TrialModel,
    cpu_rate,
)
from hpsearch.telemetry import GpuDemand, GpuMonitor
from hpsearch.trial.protocol import (
    Assignment,
    EndReport,
    EventKind,
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
        if config.fusion.fuses and config.fusion.train != MODELLED_MEMBERS:
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


class _SimulatedSession(FusedPlay, RunnerSession):
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
        self._queue: list[tuple[float, bool, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._pids = itertools.count(10_000)
        self._running: dict[str, Played] = {}
        self._events: TrialEvents | None = None
        self._workers: dict[tuple[str, ...], int] = {}
        """Worker processes started per GPU (as Tune keeps them: one per trial slot, reused)."""

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
        # A sample runs before what else is due at its instant, as the driver decides on the
        # newest sample (the H200 doubled once a sample: main-job-2026-11-27-nvidia-h200.json).
        heapq.heappush(self._queue, (when, not quiet, next(self._order), action))

    def _advance(self) -> bool:
        """Run the next scheduled action, moving the clock; whether it may have made room."""
        when, may_make_room, _, action = heapq.heappop(self._queue)
        assert isinstance(self._virtual, VirtualClock)
        self._virtual.now = max(self._virtual.now, when)
        action()
        return may_make_room

    def _tick(self) -> None:
        self._live().maintain()  # on the wall clock: heartbeats are real
        self._at(self._now() + self._tick_s, self._tick)

    def _sample(self) -> None:
        assert self._monitor is not None
        self._monitor.sample_now()
        self._at(self._now() + self._monitor.interval_s, self._sample, quiet=True)

    def _sharing(self) -> SharingModel:
        return self._gpus.sharing

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
        trial = Played(launch_id, launch, assigned, dict(first.params))
        trial.cold = self._new_worker(assigned.gpu_ids)
        self._running[launch_id] = trial
        self._live().started(launch_id)
        if len(launch.members) > 1:
            trial.members = [PlayedMember(spec) for spec in launch.members]
            trial.parts = [list(trial.members)]
            self._next_part(trial)
        else:
            self._begin(trial, trial.params)

    def _new_worker(self, gpu_ids: tuple[str, ...]) -> bool:
        """Whether the launch needs a new worker process: every one started for its GPU is
        busy (Tune reuses a worker only for trials asking the same resources)."""
        busy = sum(t.assigned.gpu_ids == gpu_ids for t in self._running.values())
        started = self._workers.get(gpu_ids, 0)
        if busy < started:
            return False
        self._workers[gpu_ids] = started + 1
        return True

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

    def _send(self, trial: Played, event: WorkerEvent) -> None:
        if not trial.placed:  # the first event carries the placement, as a worker's does
            event = replace(event, assigned=trial.assigned)
            trial.placed = True
        self._live().event(trial.trial_id, event)

    def _begin(self, trial: Played, params: dict[str, Any]) -> None:
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
        if trial.cold and plan.cold_start_s > 0:
            trial.cold = False
            self._phase(trial, plan.cold_start_s, lambda: self._play(trial, params))
        else:
            self._play(trial, params)

    def _play(self, trial: Played, params: dict[str, Any]) -> None:
        """The plan's run-up to an out of memory, or its first epoch."""
        plan = trial.plan
        assert plan is not None
        if plan.oom is not None:
            self._phase(trial, plan.oom_after_s, lambda: self._ran_out(trial, params))
        elif plan.epochs:
            self._phase(trial, plan.epochs[0].seconds, lambda: self._epoch(trial))
        else:
            self._end(trial, Outcome.COMPLETE)

    def _memory_left(self, trial: Played) -> float | None:
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

    def _epoch(self, trial: Played) -> None:
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

    def _ran_out(self, trial: Played, params: dict[str, Any]) -> None:
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
        self, trial: Played, outcome: Outcome, end: EndReport | None = None, error: str = ""
    ) -> None:
        report = end or EndReport(retries=tuple(trial.retries))
        ended = WorkerEvent(kind=EventKind.END, outcome=outcome, error=error, end=report)
        self._send(trial, ended)
        trial.done = None
        del self._running[trial.trial_id]
        self._live().ended(trial.trial_id)
        self._rerate()  # the others run faster now

    # -- how fast each trial runs ----------------------------------------------------

    def _phase(self, trial: Played, solo_seconds: float, done: Callable[[], None]) -> None:
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

    def _finisher(self, trial: Played, version: int) -> Callable[[], None]:
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

    def rates(self, trials: list[Played], cores: float) -> dict[str, float]:
        """Each trial's speed, a share of its solo speed: its GPU's sharing, the node's CPUs."""
        by_gpu: dict[str | None, list[Played]] = {}
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


def _demand(trial: Played) -> GpuDemand:
    load = trial.plan.load if trial.plan is not None else None
    if load is None:
        return GpuDemand(0.0)
    return GpuDemand(load.utilization_pct, load.sm_share)
