"""The static policy: a fixed number of trials per GPU, or CPU only."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

from hpsearch.placement._base import Admission, ClusterCapacity, ResourcePolicy, RunningTrial

_EPSILON = 1e-9


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
