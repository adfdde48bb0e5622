"""The GPU telemetry a config asks for, opened: NVML, or simulated GPUs.

The composition root's job and the CLI's (``hpsearch monitor``): it joins the
readings (:mod:`hpsearch.telemetry`) and the simulated GPUs
(:mod:`hpsearch.simulation`) as the config's ``telemetry`` section says.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hpsearch.config import ExecutionSpec, TelemetrySpec
from hpsearch.errors import HpsearchError
from hpsearch.simulation import LoadModelBackend, SharedGpus, SharingModel, simulated_backend
from hpsearch.telemetry import NvmlBackend, TelemetryBackend, TelemetryUnavailable


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

    def search_line(self, ray_gpus: float, *, cpu_only: bool = False) -> str:
        """The line a search opens with: what is read, and, with nothing read, where trials run
        (``ray_gpus``: the GPUs Ray has; ``cpu_only``: the trials take none of them)."""
        if self.backend is not None:
            return self.line
        if ray_gpus <= 0 or cpu_only:
            return f"{self.line}; trials run on CPU"
        # Ray's GPUs still run the trials (telemetry off, or GPUs NVML does not read).
        return f"{self.line}; trials run on the {ray_gpus:g} GPU(s) Ray has, unread"

    @property
    def smallest_memory_mb(self) -> float | None:
        """The smallest GPU's memory, to turn a GPU share into a memory cap (``None``: unknown)."""
        if self.backend is None:
            return None
        sizes = [g.memory_total_mb for g in self.backend.gpus() if g.memory_total_mb]
        return min(sizes) if sizes else None

    def execution_for(self, execution: ExecutionSpec, source: str) -> ExecutionSpec:
        """``execution``, with one logical Ray GPU per simulated GPU on a local Ray.

        Raises:
            HpsearchError: ``execution.num_gpus`` differs from the simulated GPUs' count.
        """
        backend = self.backend
        if backend is None or not backend.simulated or execution.address:
            return execution
        simulated = len(backend.gpus())
        if execution.num_gpus is None:
            return execution.model_copy(update={"num_gpus": simulated})
        if execution.num_gpus != simulated:
            raise HpsearchError(
                f"{source}: execution.num_gpus is {execution.num_gpus} but {simulated} "
                "GPU(s) are simulated; leave num_gpus out (the local Ray then gets one logical "
                "GPU per simulated GPU) or simulate as many GPUs as Ray has"
            )
        return execution


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
            backend,
            f"GPU telemetry: {backend.describe()}",
            sink,
            SharingModel(spec.simulation.sharing),
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
