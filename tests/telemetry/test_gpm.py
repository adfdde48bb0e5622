"""GPM read through the signatures nvidia-ml-py has: a fake binding (no Hopper GPU here)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from hpsearch.telemetry import GpmReader, gpm_supported


class _Metric:
    def __init__(self) -> None:
        self.metricId = 0
        self.value = 0.0


class _Request:
    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [_Metric() for _ in range(98)]


class FakeGpm:
    """``pynvml``'s GPM calls as nvidia-ml-py 13.x has them (the GPU image's): the support
    query takes the device alone and returns the struct; metrics come back in the request.
    ``old=True``: as before 12.535, the caller passes the support struct to fill."""

    NVML_GPM_SUPPORT_VERSION = 1
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3

    def __init__(self, *, supported: bool = True, old: bool = False) -> None:
        self.supported, self.samples, self.freed = supported, 0, 0
        self.c_nvmlGpmMetricsGet_t = _Request
        self.c_nvmlGpmSupport_t = lambda: SimpleNamespace(version=0, isSupportedDevice=0)
        self.nvmlGpmQueryDeviceSupport: Callable[..., Any] = self._old_query if old else self._query

    def _query(self, device: Any) -> Any:
        return SimpleNamespace(version=1, isSupportedDevice=int(self.supported))

    def _old_query(self, device: Any, support: Any) -> None:
        assert support.version == self.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(self.supported)

    def nvmlGpmSampleAlloc(self) -> Any:
        return SimpleNamespace(taken=0)

    def nvmlGpmSampleGet(self, device: Any, sample: Any) -> Any:
        self.samples += 1
        sample.taken = self.samples
        return sample

    def nvmlGpmMetricsGet(self, request: _Request) -> _Request:
        assert request.version == self.NVML_GPM_METRICS_GET_VERSION
        assert request.sample2.taken > request.sample1.taken  # later minus earlier
        values = {self.NVML_GPM_METRIC_SM_UTIL: 12.5, self.NVML_GPM_METRIC_SM_OCCUPANCY: 3.0}
        for metric in request.metrics[: request.numMetrics]:
            metric.value = values[metric.metricId]
        return request

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self.freed += 1


@pytest.mark.parametrize("old", [False, True], ids=["nvidia-ml-py 13", "before 12.535"])
def test_gpm_support_is_asked_with_the_installed_bindings_signature(old: bool) -> None:
    assert gpm_supported(FakeGpm(old=old), handle=object())
    assert not gpm_supported(FakeGpm(supported=False, old=old), handle=object())
    assert not gpm_supported(SimpleNamespace(), handle=object())  # a binding without GPM


def test_sm_activity_is_read_between_successive_samples() -> None:
    nvml = FakeGpm()
    reader = GpmReader(nvml, handle=object())

    first, second = reader.read(), reader.read()

    assert (first.sm_util_pct, first.sm_occupancy_pct) == (12.5, 3.0)
    assert second == first
    assert nvml.samples == 3  # one to start from, one a reading
    reader.close()
    assert nvml.freed == 2
