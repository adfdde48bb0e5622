"""A remote node's GPU monitor shows the GPUs its Ray sees (a fake NVML: no GPU here)."""

from __future__ import annotations

import sys

import pytest

from hpsearch.config import TelemetrySpec
from hpsearch.runner._node_monitors import NodeMonitorActor
from hpsearch.telemetry import TelemetryUnavailable
from tests.telemetry.conftest import FakeGpu, FakeNvml


@pytest.fixture
def four_gpus(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """A machine of four GPUs, as NVML numbers them."""
    nvml = FakeNvml([FakeGpu(utilization=10 * i) for i in range(4)])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    return nvml


def test_a_node_given_two_gpus_of_its_machine_reads_as_those_two(
    four_gpus: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The raylet's CUDA_VISIBLE_DEVICES, which the monitor (asking Ray for no GPU) keeps.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1,2")  # Ray's num_gpus: 2, the first two
    actor = NodeMonitorActor(TelemetrySpec(backend="nvml", interval_s=0.05), gpus=2)
    try:
        assert [g.index for g in actor.gpus()] == [1, 3]
        samples = actor.samples(0.0)
        assert samples
        assert {s.index for s in samples} == {1, 3}
    finally:
        actor._monitor.stop()


def test_a_node_whose_gpus_are_mig_instances_has_no_monitor(
    four_gpus: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4f6e5a2b,MIG-7a1c3e5f")
    with pytest.raises(TelemetryUnavailable, match="MIG instances"):
        NodeMonitorActor(TelemetrySpec(backend="nvml"), gpus=2)
    assert four_gpus.shut_down
