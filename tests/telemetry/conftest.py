"""A fake NVML library: stands in for the NVIDIA driver CI machines do not have."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

MIB = 1024 * 1024


class FakeNvmlError(Exception):
    """Shaped like pynvml.NVMLError: the NVML return code is in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def _one_process() -> list[tuple[int, float | None]] | None:
    return [(1234, 900.0)]


@dataclass
class FakeGpu:
    """One GPU the fake driver reports; ``None`` values raise NOT_SUPPORTED."""

    name: str = "NVIDIA H100 80GB HBM3"
    utilization: int = 42
    used_mib: float = 1000.0
    total_mib: float = 81559.0
    power_mw: int | None = 150_000
    limit_mw: int | None = 700_000
    temperature: int = 40
    processes: list[tuple[int, float | None]] | None = field(default_factory=_one_process)
    lost: bool = False
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    compute_mode: int | None = 0
    """NVML's: 0 default, 3 exclusive-process; ``None`` raises NOT_SUPPORTED."""


class FakeNvml:
    """The subset of ``pynvml`` the NVML backend calls, over a list of :class:`FakeGpu`."""

    NVMLError = FakeNvmlError
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, gpus: list[FakeGpu], *, library: bool = True) -> None:
        self.gpus = gpus
        self.library = library
        self.shut_down = False

    def nvmlInit(self) -> None:
        if not self.library:
            raise FakeNvmlError(self.NVML_ERROR_LIBRARY_NOT_FOUND)

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:
        return gpu.name

    def nvmlDeviceGetComputeMode(self, gpu: FakeGpu) -> int:
        if gpu.compute_mode is None:
            raise FakeNvmlError(self.NVML_ERROR_NOT_SUPPORTED)
        return gpu.compute_mode

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        self._check(gpu)
        return gpu.uuid

    def _check(self, gpu: FakeGpu) -> None:
        if gpu.lost:
            raise FakeNvmlError(self.NVML_ERROR_GPU_IS_LOST)

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> Any:
        self._check(gpu)
        return SimpleNamespace(used=gpu.used_mib * MIB, total=gpu.total_mib * MIB)

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> Any:
        self._check(gpu)
        return SimpleNamespace(gpu=gpu.utilization, memory=0)

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        self._check(gpu)
        if gpu.power_mw is None:
            raise FakeNvmlError(self.NVML_ERROR_NOT_SUPPORTED)
        return gpu.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, gpu: FakeGpu) -> int:
        if gpu.limit_mw is None:
            raise FakeNvmlError(self.NVML_ERROR_NOT_SUPPORTED)
        return gpu.limit_mw

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        self._check(gpu)
        return gpu.temperature

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGpu) -> list[Any]:
        self._check(gpu)
        if gpu.processes is None:
            raise FakeNvmlError(self.NVML_ERROR_NO_PERMISSION)
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=None if mib is None else mib * MIB)
            for pid, mib in gpu.processes
        ]


@pytest.fixture
def fake_nvml() -> FakeNvml:
    """Two GPUs: a full-featured one, and one that supports neither power nor the process list."""
    return FakeNvml(
        [
            FakeGpu(),
            FakeGpu(
                name="Tesla T4", total_mib=15360.0, power_mw=None, limit_mw=None, processes=None
            ),
        ]
    )
