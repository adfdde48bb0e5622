"""Resource policies: how much of the cluster the next trial gets, decided when it can start.

The runner asks its policy each time a trial could be launched. The answer (or
``None``: not now) goes into that trial's Tune config, which is what Ray's
resource function reads, so a policy may change its answer at any point of a
search and the next trials follow it. Policies are pure: no Ray, no I/O.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

_EPSILON = 1e-9


@dataclass(frozen=True)
class ClusterCapacity:
    """What Ray has to give: total CPUs and GPUs (logical GPUs count)."""

    cpus: float
    gpus: float


@dataclass(frozen=True)
class Admission:
    """The resources a new trial runs with, and why.

    Attributes:
        cpus: CPUs reserved in Ray.
        gpus: the share of one GPU the trial may use (its memory cap follows from it).
        reason: why, for the records.
        gpu_index: the GPU it runs on, when the policy places trials itself
            (``None``: wherever Ray puts it).
        node: the Ray node id of that GPU.
        node_address: that node's address (for people).
        ray_gpus: the GPU amount asked of Ray when it differs from ``gpus`` (a
            placing policy keeps its own account; Ray's is bookkeeping).
        co_tenants: trials already on that GPU when this one was admitted.
    """

    cpus: float
    gpus: float
    reason: str
    gpu_index: int | None = None
    node: str | None = None
    node_address: str | None = None
    ray_gpus: float | None = None
    co_tenants: tuple[int, ...] = ()


@dataclass(frozen=True)
class RunningTrial:
    """A trial holding resources now.

    Attributes:
        number: the Optuna trial number.
        cpus, gpus: what it was admitted with (``gpus``: its share of one GPU).
        gpu_index, node: where a placing policy put it (the GPU's index, the Ray node id).
        warm_at: when its first report came (past its warm-up); ``None``: not yet.
        pid: its worker process, once known.
        busy_cpus: CPUs it keeps busy (1 plus its DataLoader workers), once known.
        alone: it runs alone on a whole GPU (an OOM retry).
        new_kind: it is larger, in the parameters that grow memory, than any
            trial measured so far.
    """

    number: int
    cpus: float
    gpus: float
    gpu_index: int | None = None
    node: str | None = None
    warm_at: float | None = None
    pid: int | None = None
    busy_cpus: float | None = None
    alone: bool = False
    new_kind: bool = False


class ResourcePolicy(ABC):
    """Decides whether another trial may start now, and with what resources."""

    @abstractmethod
    def admit(
        self,
        running: Sequence[RunningTrial],
        capacity: ClusterCapacity,
        *,
        whole_gpu: bool = False,
    ) -> Admission | None:
        """Resources for one more trial next to ``running``, or ``None`` to wait.

        ``whole_gpu``: the trial must have a GPU to itself (it ran out of memory
        under a shared GPU's cap and runs once more alone).
        """


class StaticPolicy(ResourcePolicy):
    """A fixed number of trials per GPU (each gets ``1/trials_per_gpu`` of one), or CPU only.

    Concurrency is whatever fits: CPUs over ``cpus_per_trial``, GPUs times
    ``trials_per_gpu``, capped by ``max_concurrent``. ``trials_per_gpu`` may be
    changed while a search runs; trials started after the change use it.

    Args:
        cpus_per_trial: CPUs reserved per trial.
        trials_per_gpu: trials per GPU; 0 asks for no GPU.
        max_concurrent: most trials at once; ``None`` for no cap beyond resources.
    """

    def __init__(
        self,
        cpus_per_trial: float = 1.0,
        trials_per_gpu: int = 1,
        max_concurrent: int | None = None,
    ) -> None:
        if cpus_per_trial <= 0:
            raise ValueError("cpus_per_trial must be > 0")
        if max_concurrent is not None and max_concurrent < 1:
            raise ValueError("max_concurrent must be >= 1")
        self._cpus = cpus_per_trial
        self._max_concurrent = max_concurrent
        self._lock = threading.Lock()
        self._trials_per_gpu = 0
        self.trials_per_gpu = trials_per_gpu

    @property
    def trials_per_gpu(self) -> int:
        """Trials sharing one GPU (0: no GPU)."""
        return self._trials_per_gpu

    @trials_per_gpu.setter
    def trials_per_gpu(self, value: int) -> None:
        if value < 0:
            raise ValueError("trials_per_gpu must be >= 0")
        with self._lock:
            self._trials_per_gpu = value

    def admit(
        self,
        running: Sequence[RunningTrial],
        capacity: ClusterCapacity,
        *,
        whole_gpu: bool = False,
    ) -> Admission | None:
        with self._lock:
            per_gpu = self._trials_per_gpu
        gpus = 1.0 / per_gpu if per_gpu and capacity.gpus > 0 else 0.0
        if whole_gpu and gpus:
            per_gpu, gpus = 1, 1.0
        limits = [math.floor(capacity.cpus / self._cpus + _EPSILON)]
        if gpus:
            limits.append(math.floor(capacity.gpus * per_gpu + _EPSILON))
        if self._max_concurrent is not None:
            limits.append(self._max_concurrent)
        limit = min(limits)
        if len(running) >= limit:
            return None
        # Trials started under an earlier answer still hold their share: wait until
        # the new trial really fits, rather than create it to sit pending in Ray.
        used_cpus = sum(t.cpus for t in running)
        used_gpus = sum(t.gpus for t in running)
        if used_cpus + self._cpus > capacity.cpus + _EPSILON:
            return None
        if used_gpus + gpus > capacity.gpus + _EPSILON:
            return None
        if whole_gpu and gpus:
            reason = "alone on a whole GPU: it ran out of memory under a shared cap"
        elif gpus:
            reason = f"static: {per_gpu} trial(s) per GPU, {limit} at once"
        else:
            reason = f"static: CPU only, {limit} at once"
        return Admission(cpus=self._cpus, gpus=gpus, reason=reason)
