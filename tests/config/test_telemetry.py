"""The telemetry section and the --simulate grammar."""

from __future__ import annotations

import pytest

from hpsearch.config import load_config
from hpsearch.errors import ConfigError
from hpsearch.simulation import SimulatedSpec, parse_simulate
from tests.conftest import ConfigWriter


def test_telemetry_defaults_to_auto_at_five_hertz(write_config: ConfigWriter) -> None:
    telemetry = load_config(write_config()).telemetry
    assert (telemetry.backend, telemetry.interval_s, telemetry.simulated) == ("auto", 0.2, None)
    assert telemetry.simulation == SimulatedSpec()


def test_simulated_section(write_config: ConfigWriter) -> None:
    path = write_config(
        {
            "telemetry": {
                "backend": "simulated",
                "interval_s": 0.5,
                "simulated": {"source": "trace", "trace": "rtx4050-seed004"},
            }
        }
    )
    telemetry = load_config(path).telemetry
    assert telemetry.simulation.trace == "rtx4050-seed004"


@pytest.mark.parametrize(
    ("telemetry", "key", "text"),
    [
        ({"backend": "nvidia"}, "telemetry.backend", "auto"),
        ({"interval": 2}, "telemetry.interval", "interval_s"),
        ({"simulated": {"source": "load"}}, "telemetry", "set backend: simulated"),
        (
            {"backend": "simulated", "simulated": {"source": "trace"}},
            "telemetry.simulated",
            "trace",
        ),
        ({"backend": "simulated", "simulated": {"gpus": 0}}, "telemetry.simulated.gpus", "0"),
    ],
)
def test_telemetry_errors_name_the_key(
    write_config: ConfigWriter, telemetry: dict[str, object], key: str, text: str
) -> None:
    path = write_config({"telemetry": telemetry})
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert f"{key}" in message
    assert text in message
    assert "\n" not in message


def test_parse_simulate_forms() -> None:
    assert parse_simulate("rtx3090-seed001") == SimulatedSpec(
        source="trace", trace="rtx3090-seed001"
    )
    assert parse_simulate("mine.csv") == SimulatedSpec(source="trace", trace="mine.csv")
    assert parse_simulate("load") == SimulatedSpec(source="load")
    spec = parse_simulate("constant: gpus=2, utilization_pct=95, memory_total_mb=81559")
    assert (spec.source, spec.gpus, spec.utilization_pct, spec.memory_total_mb) == (
        "constant",
        2,
        95.0,
        81559.0,
    )
    with pytest.raises(ValueError, match="not a built-in trace"):
        parse_simulate("h100")
    with pytest.raises(ValueError, match="gpus"):
        parse_simulate("load:gpus=-1")
    with pytest.raises(ValueError, match="nope"):
        parse_simulate("load:nope=1")
