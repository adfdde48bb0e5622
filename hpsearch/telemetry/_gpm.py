"""GPM: how busy a GPU's SMs are, where NVML's utilisation only says some kernel ran.

``utilization.gpu`` is the share of time *some* kernel runs, so a stream of small
kernels reads near 100% while most SMs idle. Hopper and newer GPUs expose GPM
metrics: ``SM_UTIL`` (the share of SMs busy) and ``SM_OCCUPANCY`` (active warps
against the most). A reading is the difference of two GPM samples taken a while
apart. :class:`GpmReader` takes them through the ``pynvml`` it is given, with
the signatures ``nvidia-ml-py`` 12.535 and later have (``nvmlGpmQueryDeviceSupport
(device)`` returns the support struct; earlier ones took it as a second
argument, and both are accepted).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GpmReading:
    """SM activity between two samples: the share of SMs busy, and of warps active."""

    sm_util_pct: float
    sm_occupancy_pct: float


def gpm_supported(nvml: Any, handle: Any) -> bool:
    """Whether the GPU (and its driver) has GPM; ``False`` where the binding lacks it."""
    query = getattr(nvml, "nvmlGpmQueryDeviceSupport", None)
    if query is None:
        return False
    if len(inspect.signature(query).parameters) >= 2:
        # nvidia-ml-py before 12.535: the caller passes the struct to fill.
        support = nvml.c_nvmlGpmSupport_t()
        support.version = nvml.NVML_GPM_SUPPORT_VERSION
        query(handle, support)
    else:
        support = query(handle)
    return bool(support.isSupportedDevice)


class GpmReader:
    """Reads one GPU's SM activity over successive intervals (two samples, swapped).

    Args:
        nvml: the ``pynvml`` binding (a test passes a fake).
        handle: the GPU's NVML handle.
    """

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle
        self._previous = nvml.nvmlGpmSampleAlloc()
        self._current = nvml.nvmlGpmSampleAlloc()
        nvml.nvmlGpmSampleGet(handle, self._previous)

    def read(self) -> GpmReading:
        """SM activity since the previous call (or since the reader was made)."""
        nvml = self._nvml
        nvml.nvmlGpmSampleGet(self._handle, self._current)
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 2
        request.sample1, request.sample2 = self._previous, self._current
        request.metrics[0].metricId = nvml.NVML_GPM_METRIC_SM_UTIL
        request.metrics[1].metricId = nvml.NVML_GPM_METRIC_SM_OCCUPANCY
        answer = nvml.nvmlGpmMetricsGet(request)
        got = answer if answer is not None else request
        self._previous, self._current = self._current, self._previous
        return GpmReading(float(got.metrics[0].value), float(got.metrics[1].value))

    def close(self) -> None:
        """Free the two samples."""
        self._nvml.nvmlGpmSampleFree(self._previous)
        self._nvml.nvmlGpmSampleFree(self._current)
