"""Resource policies: how much of the cluster the next trial gets, decided when it can start.

The scheduler asks its policy each time a trial could be launched. The answer
(or ``None``: not now) goes into that trial's spec, which is what the runner's
resource request reads, so a policy may change its answer at any point of a
search and the next trials follow it. Policies are pure: no Ray, no I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass


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
        room_seen_at: when that GPU's latest samples showed it nearly empty, of memory
            and of work (``None``: they did not, or no sample says): a fused group
            there may double.
    """

    cpus: float
    gpus: float
    reason: str
    gpu_index: int | None = None
    node: str | None = None
    node_address: str | None = None
    ray_gpus: float | None = None
    co_tenants: tuple[int, ...] = ()
    room_seen_at: float | None = None


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
        started_at: when it was admitted (``None``: not known).
        mps_client: its worker is a client of an MPS daemon (else time-sliced).
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
    started_at: float | None = None
    mps_client: bool = False


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


@dataclass(frozen=True)
class NodeGpus:
    """One node's GPUs and CPUs, as the runner reports them.

    Attributes:
        node_id: the node's id (what a trial is pinned to).
        node: the node's address.
        cpus: its CPUs.
        gpus: the indices of its GPUs (CUDA order, which the runner sets to PCI bus order).
        memory_mb: each GPU's memory where a monitor reads it.
        monitored: whether a GPU monitor (the driver's, or the node's own) reads its GPUs.
    """

    node_id: str
    node: str
    cpus: float
    gpus: tuple[int, ...]
    memory_mb: dict[int, float | None]
    monitored: bool
