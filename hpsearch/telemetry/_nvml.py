"""Reading NVIDIA GPUs through NVML (the ``pynvml`` module of ``nvidia-ml-py``)."""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

from hpsearch.telemetry._base import (
    GpuInfo,
    GpuProcess,
    GpuSample,
    TelemetryBackend,
    TelemetryUnavailable,
)
from hpsearch.telemetry._devices import user_daemon

_MIB = 1024 * 1024
_ONE_PROCESS_MODES = (1, 3)
"""NVML's compute modes that admit one process at a time: exclusive-thread (deprecated),
exclusive-process."""


class NvmlBackend(TelemetryBackend):
    """Every GPU NVML sees on this machine.

    Args:
        nvml: the NVML binding; the installed ``pynvml`` by default (tests pass a
            fake standing in for hardware CI does not have).

    Raises:
        TelemetryUnavailable: no NVML library, NVML fails to start, or no GPU.
    """

    kind = "nvml"

    def __init__(self, nvml: ModuleType | Any | None = None) -> None:
        if nvml is None:
            try:
                import pynvml

                nvml = pynvml
            except ImportError:
                raise TelemetryUnavailable(
                    "the nvidia-ml-py package is not installed (pip install nvidia-ml-py)"
                ) from None
        self._nvml: Any = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
                raise TelemetryUnavailable(
                    "no NVIDIA driver here (NVML library libnvidia-ml.so not found)"
                ) from None
            raise TelemetryUnavailable(f"NVML did not start: {exc}") from None
        try:
            count = nvml.nvmlDeviceGetCount()
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._info = [self._read_info(i, h) for i, h in enumerate(self._handles)]
        except nvml.NVMLError as exc:
            nvml.nvmlShutdown()
            raise TelemetryUnavailable(f"NVML could not list the GPUs: {exc}") from None
        if not self._handles:
            nvml.nvmlShutdown()
            raise TelemetryUnavailable("NVML found no GPU")

    def gpus(self) -> list[GpuInfo]:
        return list(self._info)

    def sample(self, now: float) -> list[GpuSample]:
        return [
            self._read(info, handle, now)
            for info, handle in zip(self._info, self._handles, strict=True)
        ]

    def close(self) -> None:
        with contextlib.suppress(self._nvml.NVMLError):  # nothing left to release
            self._nvml.nvmlShutdown()

    # -- internals -------------------------------------------------------------

    def _read_info(self, index: int, handle: Any) -> GpuInfo:
        name = self._nvml.nvmlDeviceGetName(handle)
        memory = self._optional(lambda: self._nvml.nvmlDeviceGetMemoryInfo(handle))
        limit = self._optional(lambda: self._nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
        mode = self._optional(lambda: self._nvml.nvmlDeviceGetComputeMode(handle))
        return GpuInfo(
            index=index,
            name=name.decode() if isinstance(name, bytes) else str(name),
            memory_total_mb=memory.total / _MIB if memory is not None else None,
            power_limit_w=limit / 1000 if limit is not None else None,
            # A user's MPS daemon is the one process such a GPU has: its clients share it.
            exclusive=mode in _ONE_PROCESS_MODES and not user_daemon(),
        )

    def _read(self, info: GpuInfo, handle: Any, now: float) -> GpuSample:
        nvml = self._nvml
        try:
            utilization = self._optional(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
            memory = self._optional(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
            power = self._optional(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
            temperature = self._optional(
                lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
            )
            processes = self._optional(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        except nvml.NVMLError as exc:
            # A GPU that fails (fallen off the bus, reset) is reported; the others are read.
            return GpuSample(time=now, index=info.index, name=info.name, error=str(exc))
        return GpuSample(
            time=now,
            index=info.index,
            name=info.name,
            utilization_pct=float(utilization.gpu) if utilization is not None else None,
            memory_used_mb=memory.used / _MIB if memory is not None else None,
            memory_total_mb=memory.total / _MIB if memory is not None else info.memory_total_mb,
            power_w=power / 1000 if power is not None else None,
            power_limit_w=info.power_limit_w,
            temperature_c=float(temperature) if temperature is not None else None,
            processes=_processes(processes) if processes is not None else None,
        )

    def _optional(self, query: Any) -> Any:
        """The query's answer, or ``None`` where this GPU does not support it or withholds it."""
        nvml = self._nvml
        try:
            return query()
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) in (
                nvml.NVML_ERROR_NOT_SUPPORTED,
                nvml.NVML_ERROR_NO_PERMISSION,
                nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
            ):
                return None
            raise


def _processes(entries: Any) -> tuple[GpuProcess, ...]:
    return tuple(
        GpuProcess(
            pid=int(entry.pid),
            # NVML gives None (pynvml's translation) where the driver withholds it.
            memory_mb=entry.usedGpuMemory / _MIB if entry.usedGpuMemory is not None else None,
        )
        for entry in entries
    )
