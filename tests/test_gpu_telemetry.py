"""Opening the telemetry a config asks for: which backend, its line, where declared loads go."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch.config import TelemetrySpec
from hpsearch.errors import HpsearchError
from hpsearch.gpu_telemetry import open_backend
from hpsearch.simulation import LoadModelBackend, SimulatedSpec, simulated_backend


@pytest.mark.usefixtures("nvml_missing")
def test_open_backend_auto_without_gpu_runs_on() -> None:
    opened = open_backend(TelemetrySpec())
    assert opened.backend is None
    assert opened.load_sink is None
    assert opened.line.startswith("GPU telemetry off:")
    assert "\n" not in opened.line
    with pytest.raises(HpsearchError, match=r"telemetry.backend: nvml, but .*backend: auto"):
        open_backend(TelemetrySpec(backend="nvml"))


def test_with_nothing_read_the_search_says_where_its_trials_run() -> None:
    off = open_backend(TelemetrySpec(backend="off"))
    assert off.search_line(0.0) == "GPU telemetry off (telemetry.backend: off); trials run on CPU"
    assert off.search_line(2.0).endswith("; trials run on the 2 GPU(s) Ray has, unread")
    assert off.search_line(2.0, cpu_only=True).endswith("; trials run on CPU")
    simulated = open_backend(TelemetrySpec(backend="simulated"))
    assert simulated.search_line(1.0) == simulated.line


def test_open_backend_off_and_simulated() -> None:
    assert open_backend(TelemetrySpec(backend="off")).backend is None
    opened = open_backend(
        TelemetrySpec(backend="simulated", simulated=SimulatedSpec(source="load", gpus=2))
    )
    assert isinstance(opened.backend, LoadModelBackend)
    assert len(opened.backend.gpus()) == 2
    assert "load model" in opened.line
    # Declared loads reach the load model: the search feeds what it shows.
    assert opened.load_sink is opened.backend


def test_replayed_and_constant_gpus_take_no_declared_load() -> None:
    for source in ("constant", "trace"):
        trace = "rtx4050-seed004" if source == "trace" else None
        opened = open_backend(
            TelemetrySpec(backend="simulated", simulated=SimulatedSpec(source=source, trace=trace))
        )
        assert opened.backend is not None
        assert opened.load_sink is None


def test_missing_trace_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(HpsearchError, match=r"telemetry.simulated.trace: .*nope.csv"):
        simulated_backend(SimulatedSpec(source="trace", trace=str(tmp_path / "nope.csv")))
