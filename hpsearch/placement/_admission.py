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

import threading
import time
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
from hpsearch.placement._packing import PackingPolicy
from hpsearch.placement._views import (
    GpuDecision,
    GpuKey,
    GpuView,
    OomEvent,
    PackingView,
    TrialOnGpu,
)
from hpsearch.telemetry import ClusterReadings, summarize

SERIES_INTERVAL_S = 2.0
"""Seconds between points of the parent run's per-GPU series (changes are logged at once)."""


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
        """A GPU's limit was first set or changed; ``gpu`` is its label."""

    def series(self, points: dict[str, float]) -> None:
        """Per-GPU series points: trials running, trials allowed, utilisation."""


class PackingAdmission(ResourcePolicy):
    """Admits trials where the packing policy finds room, one GPU at a time.

    Args:
        policy: the pure policy.
        nodes: the cluster's nodes and GPUs now (read every few seconds).
        request: CPUs, concurrency and the runner's GPU amount per trial.
        readings: every monitored node's GPU samples (``None``: no telemetry).
        observers: told of every first or changed limit, and given the series.
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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy
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
        self._members: dict[GpuKey, frozenset[int]] = {}
        self._members_since: dict[GpuKey, float] = {}
        self._series_at = -float("inf")
        self.decisions: list[dict[str, object]] = []
        """Every first or changed limit: time, GPU, limit, previous, reason (for the parent run)."""

    # -- told when a trial runs out ---------------------------------------------------

    def trial_ran_out(self, gpu_index: int, node_id: str, at: float, sharing: int) -> None:
        """A trial on a placed GPU ran out of memory; the next decision lowers that GPU."""
        with self._lock:
            self._ooms.append(OomEvent(GpuKey(node_id, gpu_index), at, sharing))

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
        return Admission(
            cpus=self._cpus,
            gpus=placement.share,
            reason=placement.reason,
            gpu_index=placement.gpu.index,
            node=placement.gpu.node,
            node_address=placement.gpu.address,
            ray_gpus=self._ray_gpus,
            co_tenants=placement.co_tenants,
        )

    def view(self, running: Sequence[RunningTrial]) -> PackingView:
        """What the policy reads now: every GPU, its trials and its recent readings."""
        now = self._clock()
        nodes = self._current_nodes(now)
        with self._lock:
            ooms, self._ooms = tuple(self._ooms), []
        busy = [t.busy_cpus for t in running if t.busy_cpus is not None]
        gpus = [
            self._gpu_view(node, index, [t for t in running if _on(t, node.node_id, index)])
            for node in nodes
            for index in node.gpus
        ]
        return PackingView(
            now=now,
            gpus=tuple(gpus),
            node_cpus={node.node_id: node.cpus for node in nodes},
            new_trial_cpus=max([self._cpus, *busy]),
            ooms=ooms,
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
        warm = [t.warm_at for t in trials if t.warm_at is not None]
        # Readings count from when the trials now on the GPU all ran: the latest
        # warm-up, or the latest end of another trial there, whichever is later.
        members = frozenset(t.number for t in trials)
        if self._members.get(key) != members:
            self._members[key] = members
            self._members_since[key] = self._clock()
        since = max([*warm, self._members_since[key]]) if warm else None
        samples = (
            readings.history(index, since)
            if read and since is not None and readings is not None
            else []
        )
        summary = summarize(samples) if samples else None
        on_gpu = []
        for trial in trials:
            own = [
                m
                for s in samples
                if trial.pid is not None and (m := s.process_memory_mb(trial.pid)) is not None
            ]
            on_gpu.append(
                TrialOnGpu(
                    number=trial.number,
                    warm_at=trial.warm_at,
                    cpus=trial.busy_cpus if trial.busy_cpus is not None else trial.cpus,
                    memory_mb=max(own) if own else None,
                    alone=trial.alone,
                    new_kind=trial.new_kind,
                )
            )
        return GpuView(
            key=key,
            memory_total_mb=node.memory_mb.get(index),
            trials=tuple(on_gpu),
            measured_since=since,
            utilization_pct=(summary.utilization.mean if summary and summary.utilization else None),
            memory_used_mb=summary.memory_used.max if summary and summary.memory_used else None,
            telemetry=read,
        )

    def _publish(self, view: PackingView, decisions: dict[GpuKey, GpuDecision]) -> None:
        """Tell listeners of first and changed limits; feed the parent run's series."""
        changed = False
        single_node = len({g.key.node for g in view.gpus}) == 1
        for gpu in view.gpus:
            decision = decisions[gpu.key]
            if self._limits.get(gpu.key) == decision.limit:
                continue
            changed = True
            self.decisions.append(
                {
                    "time": round(view.now, 3),
                    "gpu": gpu.key.label(single_node),
                    "node": gpu.key.address,
                    "limit": decision.limit,
                    "previous": self._limits.get(gpu.key),
                    "running": len(gpu.trials),
                    "reason": decision.reason,
                }
            )
            self._limits[gpu.key] = decision.limit
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
            utilization = self._recent_utilization(gpu)
            if utilization is not None:
                points[f"packing_{label}_utilization_pct"] = utilization
        for observer in self._observers:
            observer.series(points)

    def _recent_utilization(self, gpu: GpuView) -> float | None:
        """The GPU's mean utilisation over the last few seconds (the series' value)."""
        readings = self._readings.of(gpu.key.node) if self._readings is not None else None
        if not gpu.telemetry or readings is None:
            return None
        samples = readings.history(gpu.key.index, self._clock() - 2 * SERIES_INTERVAL_S)
        summary = summarize(samples) if samples else None
        return summary.utilization.mean if summary and summary.utilization else None


def _on(trial: RunningTrial, node_id: str, index: int) -> bool:
    return trial.gpu_index == index and trial.node == node_id
