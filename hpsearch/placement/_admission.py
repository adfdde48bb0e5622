"""The packing policy wired to a running search: GPU views from the monitors, admissions out.

:class:`PackingAdmission` is the :class:`~hpsearch.placement.ResourcePolicy`
the scheduler asks before each trial. It builds a
:class:`~hpsearch.placement.PackingView` from the cluster's GPUs, the running
trials and each node's GPU samples, lets the pure
:class:`~hpsearch.placement.PackingPolicy` decide, and answers with an
:class:`~hpsearch.placement.Admission` naming the GPU, its share and its
co-tenants. The runner turns that into its own request (for Ray: a GPU amount
and the node, see ``hpsearch.runner``).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from hpsearch.placement._base import (
    Admission,
    ClusterCapacity,
    NodeGpus,
    ResourcePolicy,
    RunningTrial,
)
from hpsearch.placement._evidence import TrialSpan, device_reading, trial_profile
from hpsearch.placement._packing import PackingPolicy
from hpsearch.placement._views import (
    GpuDecision,
    GpuKey,
    GpuView,
    OomEvent,
    PackingView,
    TrialOnGpu,
    TrialProfile,
    WorkDone,
)
from hpsearch.telemetry import ClusterReadings, GpuReadings, GpuSample, summarize

SERIES_INTERVAL_S = 2.0
"""Seconds between points of the parent run's per-GPU series (changes are logged at once)."""
_ENDED_KEPT = 64
"""Ended trials' spans kept per GPU: the samples of their co-tenants are cut by them."""


@dataclass(frozen=True)
class AdmissionRequest:
    """What every admitted trial asks of the runner besides its GPU share.

    Attributes:
        cpus_per_trial: CPUs reserved per trial.
        max_concurrent: most trials at once (``None``: as many as the GPUs take).
        ray_gpus: the GPU amount asked of the runner per trial: Ray's account is
            bookkeeping, and a small equal amount never makes Ray hold back a
            trial the policy placed.
    """

    cpus_per_trial: float
    max_concurrent: int | None
    ray_gpus: float


class PackingObserver(Protocol):
    """Told what the packing policy decides (the progress view, the parent run's series)."""

    def decided(self, gpu: str, decision: GpuDecision) -> None:
        """A GPU's limit was first set or changed, or its monitor lost or back; ``gpu`` is
        its label."""

    def series(self, points: dict[str, float]) -> None:
        """Per-GPU series points: trials running, trials allowed, utilisation."""


class PackingFeedback(Protocol):
    """What the packing policy is told of the trials it placed (the running-trials listener)."""

    def trial_reported(self, trial: RunningTrial, number: int, at: float) -> None:
        """Trial ``number`` of launch ``trial`` (itself, or a fused member) reported a step."""

    def trial_ended(self, trial: RunningTrial, at: float) -> None:
        """``trial`` (a launch) ended at ``at``."""

    def trial_ran_out(self, gpu_index: int, node_id: str, at: float, sharing: int) -> None:
        """A trial on a placed GPU ran out of memory with ``sharing`` trials there."""


class PackingAdmission(ResourcePolicy):
    """Admits trials where the packing policy finds room, one GPU at a time.

    Args:
        policy: the pure policy.
        nodes: the cluster's nodes and GPUs now (read every few seconds).
        request: CPUs, concurrency and the runner's GPU amount per trial.
        readings: every monitored node's GPU samples (``None``: no telemetry).
        observers: told of every first or changed limit (and of a GPU whose monitor was
            lost or came back), and given the series.
        shared: told of each GPU the first time its limit allows more than one trial
            (MPS starts for it there).
        clock: Unix time (injectable for tests).
    """

    def __init__(
        self,
        policy: PackingPolicy,
        *,
        nodes: Callable[[], list[NodeGpus]],
        request: AdmissionRequest,
        readings: ClusterReadings | None = None,
        observers: Sequence[PackingObserver] = (),
        shared: Callable[[GpuKey], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy
        self._shared = shared
        self._told_shared: set[GpuKey] = set()
        self._nodes_source = nodes
        self._nodes: list[NodeGpus] = []
        self._nodes_at = -float("inf")
        self._cpus = request.cpus_per_trial
        self._max_concurrent = request.max_concurrent
        self._ray_gpus = request.ray_gpus
        self._readings = readings
        self._observers = list(observers)
        self._clock = clock
        self._lock = threading.Lock()
        self._ooms: list[OomEvent] = []
        self._limits: dict[GpuKey, int] = {}
        self._read: dict[GpuKey, bool] = {}  # whether a monitor read each GPU at its last record
        self._work: list[WorkDone] = []
        self._ended: list[tuple[RunningTrial, float]] = []
        self._warm: dict[GpuKey, set[int]] = {}  # launches on each GPU that reported a step
        self._last_step: dict[int, float] = {}  # each trial's latest step
        self._spans: dict[GpuKey, deque[TrialSpan]] = {}
        self._members: dict[GpuKey, frozenset[int]] = {}
        self._members_since: dict[GpuKey, float] = {}
        self._series_at = -float("inf")
        self._profiled: list[Callable[[int, TrialProfile, float | None], None]] = []
        self._held: list[Callable[[int, float, float | None], None]] = []
        self.decisions: list[dict[str, object]] = []
        """Every first or changed limit, every count judged, and every GPU whose monitor was
        lost or came back: time, GPU, limit, previous, reason and what the count measured
        (for the parent run)."""

    # -- told what the placed trials do --------------------------------------------

    def trial_ran_out(self, gpu_index: int, node_id: str, at: float, sharing: int) -> None:
        """A trial on a placed GPU ran out of memory; the next decision lowers that GPU."""
        with self._lock:
            self._ooms.append(OomEvent(GpuKey(node_id, gpu_index), at, sharing))

    def trial_reported(self, trial: RunningTrial, number: int, at: float) -> None:
        """A step of work on the trial's GPU: how long it took, with how many warm trials."""
        key = _key(trial)
        if key is None:
            return
        with self._lock:
            warm = self._warm.setdefault(key, set())
            warm.add(trial.number)
            previous = self._last_step.get(number)
            self._last_step[number] = at
            step = at - previous if previous is not None else None
            self._work.append(
                WorkDone(key, at, number, step_s=step, warm=len(warm), mps_client=trial.mps_client)
            )

    def trial_ended(self, trial: RunningTrial, at: float) -> None:
        """The trial left its GPU: its span ends, and its samples make its profile."""
        key = _key(trial)
        if key is None:
            return
        ran = at - trial.started_at if trial.started_at is not None else 0.0
        with self._lock:
            self._warm.get(key, set()).discard(trial.number)
            self._last_step.pop(trial.number, None)
            self._work.append(WorkDone(key, at, trial.number, ended=True, ran_s=ran))
            self._ended.append((trial, at))

    def on_profile(self, listener: Callable[[int, TrialProfile, float | None], None]) -> None:
        """Tell ``listener`` each launch's measured profile (see :func:`_profiles_told`)."""
        self._profiled.append(listener)

    def on_memory(self, listener: Callable[[int, float, float | None], None]) -> None:
        """Tell ``listener`` what each running launch's own process holds on its GPU, from
        its first samples on (the launch, MiB, its GPU's memory): memory needs no warm-up
        to be read, only to peak."""
        self._held.append(listener)

    # -- asked by the searcher ---------------------------------------------------

    def admit(
        self,
        running: Sequence[RunningTrial],
        capacity: ClusterCapacity,
        *,
        whole_gpu: bool = False,
    ) -> Admission | None:
        if self._max_concurrent is not None and len(running) >= self._max_concurrent:
            return None
        view = self.view(running)
        decisions = self.policy.decide(view)
        self._publish(view, decisions)
        placement = self.policy.place(view, decisions, whole_gpu=whole_gpu)
        if placement is None:
            return None
        gpu = next((g for g in view.gpus if g.key == placement.gpu), None)
        # A nearly empty GPU, as of its latest sample: a fused group there may double.
        roomy = gpu.recent if gpu is not None and self.policy.roomy(gpu) else None
        return Admission(
            cpus=self._cpus,
            gpus=placement.share,
            reason=placement.reason,
            gpu_index=placement.gpu.index,
            node=placement.gpu.node,
            node_address=placement.gpu.address,
            ray_gpus=self._ray_gpus,
            co_tenants=placement.co_tenants,
            room_seen_at=roomy.latest if roomy is not None else None,
        )

    def view(self, running: Sequence[RunningTrial]) -> PackingView:
        """What the policy reads now: every GPU, its trials and its recent readings."""
        now = self._clock()
        nodes = self._current_nodes(now)
        with self._lock:
            ooms, self._ooms = tuple(self._ooms), []
            work, self._work = tuple(self._work), []
            ended, self._ended = self._ended, []
        measured = [
            (p, trial) for trial, at in ended if (p := self._ended_profile(trial, at, running))
        ]
        profiles = tuple(p for p, _ in measured)
        busy = [t.busy_cpus for t in running if t.busy_cpus is not None]
        gpus = [
            self._gpu_view(node, index, [t for t in running if _on(t, node.node_id, index)])
            for node in nodes
            for index in node.gpus
        ]
        for told in _profiles_told(measured, gpus) if self._profiled else ():
            for listener in self._profiled:
                listener(*told)
        for gpu in gpus if self._held else ():
            for trial in gpu.trials:
                if trial.held_mb is not None:
                    for held in self._held:
                        held(trial.number, trial.held_mb, gpu.memory_total_mb)
        return PackingView(
            now=now,
            gpus=tuple(gpus),
            node_cpus={node.node_id: node.cpus for node in nodes},
            new_trial_cpus=max([self._cpus, *busy]),
            ooms=ooms,
            work=work,
            profiles=profiles,
        )

    # -- internals ---------------------------------------------------------------

    def _current_nodes(self, now: float) -> list[NodeGpus]:
        if now - self._nodes_at > 5.0 or not self._nodes:
            self._nodes = self._nodes_source()
            self._nodes_at = now
        return self._nodes

    def _gpu_view(self, node: NodeGpus, index: int, trials: list[RunningTrial]) -> GpuView:
        key = GpuKey(node.node_id, index, address=node.node)
        readings = self._readings.of(node.node_id) if self._readings is not None else None
        read = node.monitored and readings is not None
        now = self._clock()
        warm = [t.warm_at for t in trials if t.warm_at is not None]
        # Readings count from when the trials now on the GPU all ran: the latest
        # warm-up, or the latest end of another trial there, whichever is later.
        members = frozenset(t.number for t in trials)
        if self._members.get(key) != members:
            self._members[key] = members
            self._members_since[key] = now
        since = max([*warm, self._members_since[key]]) if warm else None
        spans = self._spans_now(key, trials)
        history: list[GpuSample] = []
        if read and readings is not None:
            oldest = min([now - self.policy.settings.probe_seconds, *warm])
            history = readings.history(index, oldest)
        samples = [s for s in history if since is not None and s.time > since]
        oldest_evidence = now - self.policy.settings.probe_seconds
        summary = summarize(samples) if samples else None
        # What each trial's own process held lately: only where fusion listens.
        window = oldest_evidence if self._held else None
        on_gpu = [_trial_on_gpu(t, samples, history, window) for t in trials]
        return GpuView(
            key=key,
            memory_total_mb=node.memory_mb.get(index),
            trials=tuple(on_gpu),
            measured_since=since,
            utilization_pct=(summary.utilization.mean if summary and summary.utilization else None),
            memory_used_mb=summary.memory_used.max if summary and summary.memory_used else None,
            telemetry=read,
            recent=device_reading(history, spans, now, oldest_evidence) if read else None,
            utilization_withheld=_withheld(history),
            exclusive=read and readings is not None and _exclusive(readings, index),
        )

    def _spans_now(self, key: GpuKey, trials: list[RunningTrial]) -> list[TrialSpan]:
        """The GPU's trial processes: those that ended lately, and those running now."""
        ended = list(self._spans.get(key, ()))
        running = [
            TrialSpan(t.number, t.started_at, t.warm_at, None, t.pid)
            for t in trials
            if t.started_at is not None
        ]
        return ended + running

    def _ended_profile(
        self, trial: RunningTrial, at: float, running: Sequence[RunningTrial]
    ) -> TrialProfile | None:
        """Keep the ended trial's span; its profile from the samples of its warm run."""
        key = _key(trial)
        if key is None or trial.started_at is None:
            return None
        span = TrialSpan(trial.number, trial.started_at, trial.warm_at, at, trial.pid)
        self._spans.setdefault(key, deque(maxlen=_ENDED_KEPT)).append(span)
        readings = self._readings.of(key.node) if self._readings is not None else None
        if readings is None or trial.warm_at is None:
            return None
        neighbours = [t for t in running if _key(t) == key]
        return trial_profile(
            span, readings.history(key.index, trial.warm_at), self._spans_now(key, neighbours)
        )

    def _publish(self, view: PackingView, decisions: dict[GpuKey, GpuDecision]) -> None:
        """Tell listeners of first and changed limits and of lost monitors; feed the parent
        run's series."""
        changed = False
        single_node = len({g.key.node for g in view.gpus}) == 1
        for gpu in view.gpus:
            decision = decisions[gpu.key]
            # A GPU whose monitor is lost (or back) is said too, at an unchanged limit: its
            # record then says why it holds what it holds.
            if (
                self._limits.get(gpu.key) == decision.limit
                and not decision.judged
                and self._read.get(gpu.key) == gpu.telemetry
            ):
                continue
            self._read[gpu.key] = gpu.telemetry
            changed = True
            self.decisions.append(
                _record(view.now, gpu, single_node, decision, self._limits.get(gpu.key))
            )
            self._limits[gpu.key] = decision.limit
            if decision.limit > 1 and self._shared is not None and gpu.key not in self._told_shared:
                self._told_shared.add(gpu.key)
                self._shared(gpu.key)
            for observer in self._observers:
                observer.decided(gpu.key.label(single_node), decision)
        if not self._observers:
            return
        if not changed and view.now - self._series_at < SERIES_INTERVAL_S:
            return
        self._series_at = view.now
        points: dict[str, float] = {}
        for gpu in view.gpus:
            label = gpu.key.label(single_node).replace("/", "_")
            points[f"packing_{label}_trials"] = float(len(gpu.trials))
            points[f"packing_{label}_trials_allowed"] = float(decisions[gpu.key].limit)
            utilization = _recent_utilization(self._readings, gpu, self._clock())
            if utilization is not None:
                points[f"packing_{label}_utilization_pct"] = utilization
        for observer in self._observers:
            observer.series(points)


def _record(
    now: float, gpu: GpuView, single_node: bool, decision: GpuDecision, previous: int | None
) -> dict[str, object]:
    """One entry of ``packing_decisions.json``: the decision, with what it judged and MPS's
    verdict."""
    record: dict[str, object] = {
        "time": round(now, 3),
        "gpu": gpu.key.label(single_node),
        "node": gpu.key.address,
        "limit": decision.limit,
        "previous": previous,
        "running": len(gpu.trials),
        "reason": decision.reason,
    }
    if decision.judgements:
        record["judged"] = [
            {
                "verdict": j.verdict.value,
                "level": j.level,
                "now": j.now,
                "steps_per_s": round(j.throughput, 3),
                "below": j.below,
                "gain": None if j.gain is None else round(j.gain, 3),
                "paid": j.paid,
                "reason": j.reason,
            }
            for j in decision.judgements
        ]
    if decision.mps is not None:
        record["mps"] = {
            "count": decision.mps.count,
            "mps_steps_per_s": round(decision.mps.mps_steps_per_s, 3),
            "time_sliced_steps_per_s": round(decision.mps.time_sliced_steps_per_s, 3),
            "paid": decision.mps.paid,
        }
    return record


def _recent_utilization(readings: ClusterReadings | None, gpu: GpuView, now: float) -> float | None:
    """The GPU's mean utilisation over the last few seconds (the series' value)."""
    node = readings.of(gpu.key.node) if readings is not None else None
    if not gpu.telemetry or node is None:
        return None
    samples = node.history(gpu.key.index, now - 2 * SERIES_INTERVAL_S)
    summary = summarize(samples) if samples else None
    return summary.utilization.mean if summary and summary.utilization else None


def _trial_on_gpu(
    trial: RunningTrial,
    samples: list[GpuSample],
    history: list[GpuSample],
    held_since: float | None,
) -> TrialOnGpu:
    """A running trial as the policy sees it, from its GPU's samples since all its trials
    ran warm (``samples``) and its recent ones (``history``); ``held_since``: read what
    its own process held in the samples after that time too (``None``: not)."""
    own = [
        m
        for s in samples
        if trial.pid is not None and (m := s.process_memory_mb(trial.pid)) is not None
    ]
    after_warm = sum(s.time > trial.warm_at for s in history) if trial.warm_at is not None else 0
    held: list[float] = []
    if held_since is not None and trial.pid is not None:
        # Only the last probe window: a long trial's kept samples, up to 15 minutes of
        # them, read at every admission, would cost the driver.
        start = max(held_since, trial.started_at if trial.started_at is not None else -math.inf)
        held = [m for s in _after(history, start) if (m := s.process_memory_mb(trial.pid))]
    return TrialOnGpu(
        number=trial.number,
        warm_at=trial.warm_at,
        cpus=trial.busy_cpus if trial.busy_cpus is not None else trial.cpus,
        memory_mb=max(own) if own else None,
        alone=trial.alone,
        new_kind=trial.new_kind,
        samples_warm=after_warm,
        started_at=trial.started_at,
        held_mb=max(held) if held else None,
    )


def _after(samples: list[GpuSample], start: float) -> list[GpuSample]:
    """The samples taken after ``start`` (``samples`` oldest first), read from the end."""
    first = len(samples)
    while first > 0 and samples[first - 1].time > start:
        first -= 1
    return samples[first:]


def _on(trial: RunningTrial, node_id: str, index: int) -> bool:
    return trial.gpu_index == index and trial.node == node_id


def _profiles_told(
    measured: list[tuple[TrialProfile, RunningTrial]], gpus: list[GpuView]
) -> list[tuple[int, TrialProfile, float | None]]:
    """What each launch's GPU process was measured to ask: the launch (its first trial's
    number), its profile and its GPU's memory. From launches that ended (their own
    samples), and from each GPU whose one process has a device reading past its warm-up."""
    totals = {gpu.key: gpu.memory_total_mb for gpu in gpus}
    told = [(p.number, p, totals.get(key)) for p, t in measured if (key := _key(t))]
    for gpu in gpus:
        recent = gpu.recent
        if recent is None or recent.processes != 1 or len(gpu.trials) != 1:
            continue
        alone = gpu.trials[0]
        # Only samples since its first step: a warm-up says little of the work.
        if alone.warm_at is not None and recent.since >= alone.warm_at:
            number = alone.number
            profile = TrialProfile(
                number, recent.utilization_pct, recent.memory_mb, samples=recent.samples
            )
            told.append((number, profile, gpu.memory_total_mb))
    return told


def _key(trial: RunningTrial) -> GpuKey | None:
    """The GPU a placed trial runs on (``None``: not placed by the policy)."""
    if trial.gpu_index is None or trial.node is None:
        return None
    return GpuKey(trial.node, trial.gpu_index)


def _withheld(history: Sequence[GpuSample]) -> bool:
    """Whether the GPU's samples came in, read without error, yet none held its utilisation."""
    read = [s for s in history if not s.error]
    return bool(read) and all(s.utilization_pct is None for s in read)


def _exclusive(readings: GpuReadings, index: int) -> bool:
    """Whether GPU ``index`` admits one process at a time (its compute mode, no MPS)."""
    return any(g.index == index and g.exclusive for g in readings.gpus)
