"""Opening the GPU telemetry a config asks for (the composition root's job, and the CLI's)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hpsearch.config import SimulatedSpec, TelemetrySpec
from hpsearch.errors import HpsearchError
from hpsearch.telemetry import (
    ConstantBackend,
    GpuInfo,
    LoadModelBackend,
    NvmlBackend,
    SharedGpus,
    SharingModel,
    TelemetryBackend,
    TelemetryUnavailable,
    TraceBackend,
    TraceError,
    trace_path,
)


@dataclass(frozen=True)
class OpenedTelemetry:
    """The backend a config asked for, opened.

    Attributes:
        backend: what the monitor reads; ``None``: no GPU telemetry.
        line: one line saying what will be read (or why nothing is).
        load_sink: where trials' declared loads go, when the GPUs are a load model.
        sharing: how trials sharing these GPUs slow each other: the simulated GPUs'
            own model, else the model's defaults (to be calibrated on real GPUs).
    """

    backend: TelemetryBackend | None
    line: str
    load_sink: SharedGpus | None = None
    sharing: SharingModel = field(default_factory=SharingModel)


def open_backend(spec: TelemetrySpec) -> OpenedTelemetry:
    """The backend ``spec`` asks for.

    With ``backend: auto`` and no GPU here, there is no backend and the line says why.

    Raises:
        HpsearchError: ``backend: nvml`` with no GPU to read, or a simulated trace
            that cannot be read.
    """
    if spec.backend == "off":
        return OpenedTelemetry(None, "GPU telemetry off (telemetry.backend: off)")
    if spec.backend == "simulated":
        backend = simulated_backend(spec.simulation)
        # A load model shows what the running trials declare: the search feeds it.
        sink = backend if isinstance(backend, LoadModelBackend) else None
        return OpenedTelemetry(
            backend, f"GPU telemetry: {backend.describe()}", sink, sharing_model(spec.simulation)
        )
    try:
        nvml = NvmlBackend()
    except TelemetryUnavailable as exc:
        if spec.backend == "nvml":
            raise HpsearchError(
                f"telemetry.backend: nvml, but {exc}; use backend: auto to run without "
                "GPU telemetry, or backend: simulated"
            ) from None
        return OpenedTelemetry(None, f"GPU telemetry off: {exc}")
    return OpenedTelemetry(nvml, f"GPU telemetry: {nvml.describe()}")


def simulated_backend(spec: SimulatedSpec) -> TelemetryBackend:
    """The simulated GPUs ``spec`` describes.

    Raises:
        HpsearchError: a trace that cannot be read.
    """
    if spec.source == "load":
        return LoadModelBackend(
            _gpus(spec), idle_power_w=spec.idle_power_w, sharing=sharing_model(spec)
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


def sharing_model(spec: SimulatedSpec) -> SharingModel:
    """The sharing model the ``sharing`` section of simulated GPUs describes."""
    return SharingModel(**spec.sharing.model_dump())


def _gpus(spec: SimulatedSpec) -> list[GpuInfo]:
    return [
        GpuInfo(i, spec.name, spec.memory_total_mb, spec.power_limit_w) for i in range(spec.gpus)
    ]
