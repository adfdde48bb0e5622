"""What a GPU reading is, and the small interface every telemetry backend implements."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class GpuDemand:
    """What one trial asks of its GPU: how busy it keeps it, on how many of its SMs.

    The sharing model (:class:`hpsearch.simulation.SharingModel`) says how fast
    trials that share a GPU run from their demands.

    Attributes:
        utilization_pct: its solo duty cycle, 0-100 (NVML's utilisation when alone).
        sm_share: the share of the GPU's SMs its kernels occupy while they run (0-1).
    """

    utilization_pct: float
    sm_share: float = 1.0


class SpeedModel(Protocol):
    """How fast trials that share a GPU run: the sharing model (``hpsearch.simulation``)."""

    def gpu_rates(self, demands: Sequence[GpuDemand]) -> list[float]:
        """Each trial's speed, as a share of its solo speed, while these share one GPU."""


class TelemetryUnavailable(Exception):
    """No GPU can be read here (no NVML library, no GPU); the message says why, in one line."""


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU, as the driver lists it.

    Attributes:
        pid: the process id as NVML reports it (in a container, possibly the host's pid).
        memory_mb: GPU memory the process holds; ``None`` where the driver does not say.
    """

    pid: int
    memory_mb: float | None


@dataclass(frozen=True)
class GpuSample:
    """One reading of one GPU.

    Every field but ``time``, ``index`` and ``name`` may be ``None``: a query the
    GPU does not support, or a GPU that failed to answer (``error`` then says why).

    Attributes:
        time: Unix time of the reading, in seconds.
        index: the GPU's index (NVML order, which is PCI bus order).
        name: the product name.
        utilization_pct: share of the last sample period in which a kernel ran (0-100).
        memory_used_mb, memory_total_mb: device memory in MiB.
        power_w, power_limit_w: power draw and the enforced board limit, in watts.
        temperature_c: GPU core temperature.
        processes: compute processes on the GPU; ``None`` when the list is not available.
        error: why this GPU could not be read this time; empty when it could.
    """

    time: float
    index: int
    name: str
    utilization_pct: float | None = None
    memory_used_mb: float | None = None
    memory_total_mb: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    processes: tuple[GpuProcess, ...] | None = None
    error: str = ""

    def process_memory_mb(self, pid: int) -> float | None:
        """GPU memory held by process ``pid`` in this reading, if NVML listed it."""
        for process in self.processes or ():
            if process.pid == pid:
                return process.memory_mb
        return None


@dataclass(frozen=True)
class GpuInfo:
    """What does not change about a GPU during a run.

    ``exclusive``: its compute mode lets one process at a time use it (exclusive-process,
    as clusters often set it) and no MPS daemon of the user's serves it: a second trial's
    process would find it busy.
    """

    index: int
    name: str
    memory_total_mb: float | None = None
    power_limit_w: float | None = None
    exclusive: bool = False


@dataclass(frozen=True)
class GpuLoad:
    """The load a trial puts on its GPU, as it declares it (``ctx.simulate_gpu_load``).

    Attributes:
        utilization_pct: its duty cycle alone on the GPU (0-100).
        memory_mb: the device memory its process holds, CUDA context included.
        sm_share: the share of the GPU's SMs its kernels occupy (what MPS can overlap).
        cpus: the CPUs its process keeps busy (its loop and DataLoader workers).
    """

    utilization_pct: float
    memory_mb: float
    sm_share: float = 1.0
    cpus: float = 1.0


@dataclass(frozen=True)
class TrialLoad:
    """A declared load where it runs: the trial's process and its GPUs (a load model reads it)."""

    load: GpuLoad
    pid: int | None = None
    gpus: tuple[int, ...] = ()


class LoadSink(Protocol):
    """Takes the loads trials declare (``ctx.simulate_gpu_load``): a simulated GPU's load model."""

    def set_load(self, key: int, load: TrialLoad) -> None:
        """Trial ``key`` puts ``load`` on its GPUs from now on."""

    def clear_load(self, key: int) -> None:
        """Trial ``key`` ended."""


class GpuReadings(Protocol):
    """A node's GPU samples as the driver keeps them (its own monitor, or a remote node's)."""

    @property
    def gpus(self) -> list[GpuInfo]:
        """The node's GPUs."""

    def history(self, index: int, since: float | None = None) -> list[GpuSample]:
        """Kept samples of GPU ``index`` taken after ``since`` (all kept ones by default)."""

    def sample_now(self) -> list[GpuSample]:
        """The latest reading of every GPU, taken now where the node can."""


class TelemetryBackend(abc.ABC):
    """Reads every GPU of this machine. Implementations: NVML, simulated.

    A backend is opened when constructed (raising :class:`TelemetryUnavailable`
    when there is nothing to read) and released with :meth:`close`. :meth:`sample`
    is called from the monitor's thread only.
    """

    #: Short name shown in messages and reports ("nvml", "simulated").
    kind: str = "backend"
    #: Whether the GPUs are simulated (a local Ray then declares as many logical GPUs).
    simulated: bool = False

    @abc.abstractmethod
    def gpus(self) -> list[GpuInfo]:
        """The GPUs this backend reads, in index order."""

    @abc.abstractmethod
    def sample(self, now: float) -> list[GpuSample]:
        """One reading per GPU, stamped ``now``.

        A GPU that fails to answer gives a sample with ``error`` set; the others are
        still read. Never raises for one GPU's failure.
        """

    def describe(self) -> str:
        """One line for the console: what is being read."""
        gpus = self.gpus()
        names = ", ".join(sorted({g.name for g in gpus}))
        return f"{self.kind}: {len(gpus)} GPU{'s' if len(gpus) != 1 else ''} ({names})"

    def close(self) -> None:  # noqa: B027 - most backends hold nothing to release
        """Release the library or files the backend holds."""
