"""Simulated GPUs for machines with none: constant readings, a replayed trace, or a load model.

The load model is driven by the trials that are running: each declares the
utilisation and memory it would put on its GPU (``ctx.simulate_gpu_load``), and
the simulated GPU shows their sum. With Ray given logical GPUs, this lets a
whole search, its monitor and its MLflow records run end to end in CI.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from hpsearch.errors import HpsearchError
from hpsearch.simulation._sharing import SharingModel
from hpsearch.simulation._traces import trace_path
from hpsearch.simulation.spec import SimulatedSpec
from hpsearch.telemetry import (
    GpuDemand,
    GpuInfo,
    GpuProcess,
    GpuSample,
    TelemetryBackend,
    TraceError,
    TrialLoad,
    read_trace,
)


class ConstantBackend(TelemetryBackend):
    """GPUs that always read the same values (a scripted case in tests and demos)."""

    kind = "simulated"
    simulated = True

    def __init__(
        self,
        gpus: list[GpuInfo],
        *,
        utilization_pct: float = 0.0,
        memory_used_mb: float = 0.0,
        power_w: float | None = None,
        temperature_c: float | None = 40.0,
    ) -> None:
        self._gpus = list(gpus)
        self._utilization = utilization_pct
        self._memory = memory_used_mb
        self._power = power_w
        self._temperature = temperature_c

    def gpus(self) -> list[GpuInfo]:
        return list(self._gpus)

    def sample(self, now: float) -> list[GpuSample]:
        return [
            GpuSample(
                time=now,
                index=gpu.index,
                name=gpu.name,
                utilization_pct=self._utilization,
                memory_used_mb=self._memory,
                memory_total_mb=gpu.memory_total_mb,
                power_w=self._power,
                power_limit_w=gpu.power_limit_w,
                temperature_c=self._temperature,
                processes=(),
            )
            for gpu in self._gpus
        ]

    def describe(self) -> str:
        return f"{super().describe()}, constant readings"


class TraceBackend(TelemetryBackend):
    """Replays a recorded trace, one row per GPU at each sample, from the start again at its end.

    Replay goes by row rather than by the recorded clock, so a trace recorded at
    any interval plays the same at any sampling interval.
    """

    kind = "simulated"
    simulated = True

    def __init__(self, path: Path) -> None:
        rows: dict[int, list[GpuSample]] = defaultdict(list)
        for sample in read_trace(path):
            rows[sample.index].append(sample)
        self._path = path
        self._rows = dict(sorted(rows.items()))
        self._position = 0

    def gpus(self) -> list[GpuInfo]:
        return [
            GpuInfo(index, rows[0].name, rows[0].memory_total_mb, rows[0].power_limit_w)
            for index, rows in self._rows.items()
        ]

    def sample(self, now: float) -> list[GpuSample]:
        samples = [
            replace(rows[self._position % len(rows)], time=now) for rows in self._rows.values()
        ]
        self._position += 1
        return samples

    def describe(self) -> str:
        longest = max(len(rows) for rows in self._rows.values())
        return f"{super().describe()}, replaying {self._path.name} ({longest} rows per GPU)"


class LoadModelBackend(TelemetryBackend):
    """GPUs whose readings come from the loads the running trials declare.

    Utilisation is the share of time some trial's kernels run, per the sharing
    model (at most 100%: time-sliced trials take turns); memory adds up to the
    trials' declared memory (past the total, as a real over-committed GPU never
    shows, so that a test can see it flagged); power goes linearly from idle to
    the limit with utilisation. Thread-safe: the driver declares loads while
    the monitor samples.

    Args:
        gpus: the simulated GPUs.
        idle_power_w: power at 0% utilisation.
        sharing: how trials sharing a GPU slow each other (default: time-sliced).
    """

    kind = "simulated"
    simulated = True

    def __init__(
        self,
        gpus: list[GpuInfo],
        *,
        idle_power_w: float = 5.0,
        sharing: SharingModel | None = None,
    ) -> None:
        self._gpus = list(gpus)
        self._idle_power = idle_power_w
        self.sharing = sharing or SharingModel()
        self._loads: dict[int, TrialLoad] = {}
        self._lock = threading.Lock()

    def gpus(self) -> list[GpuInfo]:
        return list(self._gpus)

    def set_load(self, key: int, load: TrialLoad) -> None:
        """Trial ``key`` puts ``load`` on its GPUs from now on."""
        with self._lock:
            self._loads[key] = load

    def clear_load(self, key: int) -> None:
        """Trial ``key`` ended."""
        with self._lock:
            self._loads.pop(key, None)

    def speed_shares(self) -> dict[int, float]:
        """Each trial's share of its solo speed, per the sharing model (its slowest GPU)."""
        with self._lock:
            loads = dict(self._loads)
        shares: dict[int, float] = {}
        for gpu in self._gpus:
            here = [key for key, load in loads.items() if gpu.index in load.gpus]
            demands = [_demand(loads[k]) for k in here]
            for key, rate in zip(here, self.sharing.gpu_rates(demands), strict=True):
                shares[key] = min(rate, shares.get(key, 1.0))
        return shares

    def sample(self, now: float) -> list[GpuSample]:
        with self._lock:
            loads = list(self._loads.values())
        samples = []
        for gpu in self._gpus:
            here = [load for load in loads if gpu.index in load.gpus]
            demands = [_demand(load) for load in here]
            utilization = self.sharing.utilization_pct(demands)
            power = None
            if gpu.power_limit_w is not None:
                power = (
                    self._idle_power + (gpu.power_limit_w - self._idle_power) * utilization / 100
                )
            samples.append(
                GpuSample(
                    time=now,
                    index=gpu.index,
                    name=gpu.name,
                    utilization_pct=utilization,
                    memory_used_mb=float(sum(load.load.memory_mb for load in here)),
                    memory_total_mb=gpu.memory_total_mb,
                    power_w=power,
                    power_limit_w=gpu.power_limit_w,
                    temperature_c=35.0 + 0.4 * utilization,
                    processes=tuple(
                        GpuProcess(load.pid, load.load.memory_mb)
                        for load in here
                        if load.pid is not None
                    ),
                )
            )
        return samples

    def describe(self) -> str:
        return f"{super().describe()}, load model driven by the running trials"


def simulated_backend(spec: SimulatedSpec) -> TelemetryBackend:
    """The simulated GPUs ``spec`` describes.

    Raises:
        HpsearchError: a trace that cannot be read.
    """
    if spec.source == "load":
        return LoadModelBackend(
            _gpus(spec), idle_power_w=spec.idle_power_w, sharing=SharingModel(spec.sharing)
        )
    if spec.source == "constant":
        return ConstantBackend(
            _gpus(spec),
            utilization_pct=spec.utilization_pct,
            memory_used_mb=spec.memory_used_mb,
            power_w=spec.power_w,
        )
    if spec.trace is None:  # the spec's validator requires it
        raise HpsearchError("telemetry.simulated.trace: missing; name a built-in trace or a CSV")
    try:
        return TraceBackend(trace_path(spec.trace))
    except TraceError as exc:
        raise HpsearchError(f"telemetry.simulated.trace: {exc}") from None


def _gpus(spec: SimulatedSpec) -> list[GpuInfo]:
    return [
        GpuInfo(i, spec.name, spec.memory_total_mb, spec.power_limit_w) for i in range(spec.gpus)
    ]


def _demand(placed: TrialLoad) -> GpuDemand:
    return GpuDemand(placed.load.utilization_pct, placed.load.sm_share)
