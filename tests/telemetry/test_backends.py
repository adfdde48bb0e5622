"""Every telemetry backend honours the same contract (the simulated ones too); NVML's own
behaviour without a GPU; samples as CSV."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from hpsearch.simulation import (
    BUILTIN_TRACES,
    ConstantBackend,
    LoadModelBackend,
    TraceBackend,
    trace_path,
)
from hpsearch.telemetry import (
    GpuInfo,
    GpuProcess,
    GpuSample,
    NvmlBackend,
    TelemetryBackend,
    TelemetryUnavailable,
    TraceError,
    TraceWriter,
    read_trace,
)
from tests.telemetry.conftest import FakeGpu, FakeNvml

LAPTOP = GpuInfo(0, "Simulated RTX 4050 Laptop GPU", 6141.0, 115.0)


def _nvml() -> TelemetryBackend:
    return NvmlBackend(FakeNvml([FakeGpu(), FakeGpu(name="Tesla T4", power_mw=None)]))


def _trace(name: str) -> TelemetryBackend:
    return TraceBackend(trace_path(name))


BACKENDS: dict[str, Callable[[], TelemetryBackend]] = {
    "nvml (fake driver)": _nvml,
    "constant": lambda: ConstantBackend([LAPTOP, GpuInfo(1, LAPTOP.name, 6141.0, 115.0)]),
    "load model": lambda: LoadModelBackend([LAPTOP]),
    **{f"trace {name}": functools.partial(_trace, name) for name in BUILTIN_TRACES},
}


@pytest.mark.parametrize("make", BACKENDS.values(), ids=BACKENDS.keys())
def test_backend_contract(make: Callable[[], TelemetryBackend]) -> None:
    backend = make()
    gpus = backend.gpus()
    assert gpus, "a backend that opened has at least one GPU"
    assert [g.index for g in gpus] == list(range(len(gpus)))
    assert backend.describe().startswith(backend.kind)
    for now in (1000.0, 1001.0, 1002.0):
        samples = backend.sample(now)
        assert [s.index for s in samples] == [g.index for g in gpus]
        for sample, gpu in zip(samples, gpus, strict=True):
            assert sample.time == now
            assert sample.name == gpu.name
            assert not sample.error
            for value in (
                sample.utilization_pct,
                sample.memory_used_mb,
                sample.memory_total_mb,
                sample.power_w,
                sample.power_limit_w,
                sample.temperature_c,
            ):
                assert value is None or (isinstance(value, float) and math.isfinite(value))
            assert sample.utilization_pct is None or 0 <= sample.utilization_pct <= 100
            assert sample.processes is None or all(
                isinstance(p, GpuProcess) for p in sample.processes
            )
    backend.close()


def test_nvml_without_a_driver_says_so_in_one_line() -> None:
    try:
        backend = NvmlBackend()
    except TelemetryUnavailable as exc:
        message = str(exc)
        assert "\n" not in message
        assert "NVML" in message or "driver" in message or "GPU" in message
    else:  # a machine with an NVIDIA GPU
        assert backend.gpus()
        backend.close()
        pytest.skip("this machine has NVML and a GPU")


def test_nvml_library_missing_is_unavailable() -> None:
    with pytest.raises(TelemetryUnavailable, match=r"libnvidia-ml"):
        NvmlBackend(FakeNvml([FakeGpu()], library=False))


def test_nvml_with_no_gpu_is_unavailable() -> None:
    with pytest.raises(TelemetryUnavailable, match="no GPU"):
        NvmlBackend(FakeNvml([]))


def test_nvml_reads_every_field_in_mib_and_watts(fake_nvml: FakeNvml) -> None:
    backend = NvmlBackend(fake_nvml)
    full, limited = backend.sample(5.0)
    assert full.utilization_pct == 42.0
    assert full.memory_used_mb == pytest.approx(1000.0)
    assert full.memory_total_mb == pytest.approx(81559.0)
    assert full.power_w == pytest.approx(150.0)
    assert full.power_limit_w == pytest.approx(700.0)
    assert full.processes == (GpuProcess(1234, 900.0),)
    assert full.process_memory_mb(1234) == pytest.approx(900.0)
    assert full.process_memory_mb(999) is None
    # Queries this GPU does not support read as None, not as a crash.
    assert limited.power_w is None
    assert limited.power_limit_w is None
    assert limited.processes is None
    assert limited.utilization_pct == 42.0
    backend.close()
    assert fake_nvml.shut_down


def test_a_gpu_that_admits_one_process_at_a_time_is_told_unless_a_users_mps_serves_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    monkeypatch.setattr("hpsearch.telemetry._devices.DEFAULT_PIPE", tmp_path / "no-daemon")
    gpus = [FakeGpu(compute_mode=3), FakeGpu(compute_mode=0), FakeGpu(compute_mode=None)]
    backend = NvmlBackend(FakeNvml(gpus))
    assert [g.exclusive for g in backend.gpus()] == [True, False, False]
    # A daemon the user runs is the one process: its clients share the GPU.
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "mps"))
    assert not any(g.exclusive for g in NvmlBackend(FakeNvml(gpus)).gpus())


def test_nvml_gpu_failing_mid_run_is_reported_and_the_others_still_read(
    fake_nvml: FakeNvml,
) -> None:
    backend = NvmlBackend(fake_nvml)
    fake_nvml.gpus[1].lost = True
    first, lost = backend.sample(7.0)
    assert not first.error
    assert first.utilization_pct == 42.0
    assert lost.error
    assert lost.utilization_pct is None
    assert lost.index == 1


def test_csv_round_trip_keeps_every_field(tmp_path: Path) -> None:
    samples = [
        GpuSample(
            time=1.5,
            index=0,
            name="A, with comma",
            utilization_pct=12.0,
            memory_used_mb=100.5,
            memory_total_mb=6141.0,
            power_w=20.0,
            power_limit_w=115.0,
            temperature_c=50.0,
            processes=(GpuProcess(7, 80.0), GpuProcess(8, None)),
        ),
        GpuSample(time=1.5, index=1, name="B", processes=()),
        GpuSample(time=1.5, index=2, name="C", error="GPU is lost"),
    ]
    path = tmp_path / "s.csv"
    with path.open("w") as stream:
        TraceWriter(stream).write(samples)
    assert read_trace(path) == samples


def test_bad_trace_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("time,gpu\n0,0\n")
    with pytest.raises(TraceError, match=r"bad.csv: missing column\(s\) name"):
        read_trace(path)
    good = tmp_path / "good.csv"
    with good.open("w") as stream:
        TraceWriter(stream).write([GpuSample(time=0.0, index=0, name="x")])
    lines = good.read_text().splitlines()
    good.write_text("\n".join([lines[0], lines[1], lines[1].replace("0.000,0,x", "0.000,0,x,abc")]))
    with pytest.raises(TraceError, match=r"good.csv:3: utilization_pct 'abc' is not a number"):
        read_trace(good)
