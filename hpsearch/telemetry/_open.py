"""Choosing and opening the telemetry backend a config asks for."""

from __future__ import annotations

from hpsearch.config import SimulatedSpec, TelemetrySpec
from hpsearch.errors import HpsearchError
from hpsearch.telemetry._base import GpuInfo, TelemetryBackend, TelemetryUnavailable
from hpsearch.telemetry._nvml import NvmlBackend
from hpsearch.telemetry._simulated import ConstantBackend, LoadModelBackend, TraceBackend
from hpsearch.telemetry._trace import TraceError, trace_path


def open_backend(spec: TelemetrySpec) -> tuple[TelemetryBackend | None, str]:
    """The backend ``spec`` asks for, and one line saying what will be read.

    With ``backend: auto`` and no GPU here, there is no backend and the line says
    why.

    Raises:
        HpsearchError: ``backend: nvml`` with no GPU to read, or a simulated trace
            that cannot be read.
    """
    if spec.backend == "off":
        return None, "GPU telemetry off (telemetry.backend: off)"
    if spec.backend == "simulated":
        backend = simulated_backend(spec.simulation)
        return backend, f"GPU telemetry: {backend.describe()}"
    try:
        nvml = NvmlBackend()
    except TelemetryUnavailable as exc:
        if spec.backend == "nvml":
            raise HpsearchError(
                f"telemetry.backend: nvml, but {exc}; use backend: auto to run without "
                "GPU telemetry, or backend: simulated"
            ) from None
        return None, f"GPU telemetry off: {exc}"
    return nvml, f"GPU telemetry: {nvml.describe()}"


def simulated_backend(spec: SimulatedSpec) -> TelemetryBackend:
    """The simulated GPUs ``spec`` describes.

    Raises:
        HpsearchError: a trace that cannot be read.
    """
    gpus = [
        GpuInfo(i, spec.name, spec.memory_total_mb, spec.power_limit_w) for i in range(spec.gpus)
    ]
    if spec.source == "load":
        return LoadModelBackend(gpus, idle_power_w=spec.idle_power_w)
    if spec.source == "constant":
        return ConstantBackend(
            gpus,
            utilization_pct=spec.utilization_pct,
            memory_used_mb=spec.memory_used_mb,
            power_w=spec.power_w,
        )
    assert spec.trace is not None  # the spec's validator requires it
    try:
        return TraceBackend(trace_path(spec.trace))
    except TraceError as exc:
        raise HpsearchError(f"telemetry.simulated.trace: {exc}") from None
