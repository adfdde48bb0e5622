"""The resource policy a search's settings ask for, built here: the root only hands it over."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from hpsearch.placement._admission import AdmissionRequest, PackingAdmission, PackingObserver
from hpsearch.placement._base import NodeGpus, ResourcePolicy
from hpsearch.placement._packing import PackingPolicy
from hpsearch.placement._static import StaticPolicy
from hpsearch.placement._views import GpuKey
from hpsearch.placement.settings import PackingSpec
from hpsearch.telemetry import ClusterReadings


class TrialShare(Protocol):
    """What each trial reserves besides its GPU share (the ``execution`` section has it)."""

    @property
    def cpus_per_trial(self) -> float: ...

    @property
    def max_concurrent(self) -> int | None: ...


def resource_policy(
    packing: PackingSpec | None,
    share: TrialShare,
    *,
    gpus: float,
    nodes: Callable[[], list[NodeGpus]],
    readings: ClusterReadings | None = None,
    observers: Sequence[PackingObserver] = (),
    shared: Callable[[GpuKey], None] | None = None,
    clock: Callable[[], float] = time.time,
) -> tuple[ResourcePolicy, PackingAdmission | None]:
    """The policy ``packing`` asks for, and its admission where GPUs are packed.

    Args:
        packing: the ``packing`` in effect (``None``: trials on CPU only).
        share: CPUs per trial and the most trials at once.
        gpus: the GPUs the runner has (none: trials on CPU only, whatever ``packing``).
        nodes: the runner's GPUs by node, as the monitor reads them now.
        readings: the monitors' readings (``None``: no GPU telemetry).
        observers: told each packing decision (the progress view, the parent run).
        shared: called the first time a GPU holds more than one trial (MPS).
        clock: Unix time, or the runner's clock.
    """
    if packing is None or gpus <= 0:
        cpu_only = StaticPolicy(
            cpus_per_trial=share.cpus_per_trial,
            trials_per_gpu=0,
            max_concurrent=share.max_concurrent,
        )
        return cpu_only, None
    placing = PackingAdmission(
        PackingPolicy(packing),
        nodes=nodes,
        request=AdmissionRequest(
            cpus_per_trial=share.cpus_per_trial,
            max_concurrent=share.max_concurrent,
            # Ray's account is bookkeeping: an equal share that fits the most trials
            # per GPU never makes Ray hold back a trial the policy placed.
            ray_gpus=1.0 / packing.most_per_gpu,
        ),
        readings=readings,
        observers=observers,
        shared=shared,
        clock=clock,
    )
    return placing, placing
