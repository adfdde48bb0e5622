"""What ``hpsearch.run`` refuses before it starts or records anything (no Ray needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

import hpsearch
from hpsearch.errors import HpsearchError
from hpsearch.runner import MODELLED_TRAIN, SimulatedRunner
from tests.conftest import ConfigWriter


def test_logical_gpus_must_match_the_simulated_ones(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config(
        {
            "train": MODELLED_TRAIN,
            "execution": {"num_gpus": 2},
            "telemetry": {"backend": "simulated", "simulated": {"gpus": 1}},
        }
    )
    with pytest.raises(HpsearchError) as raised:
        hpsearch.run(path, runner=SimulatedRunner())
    message = str(raised.value)
    assert message.startswith(f"{path}: execution.num_gpus is 2 but 1 GPU(s) are simulated;")
    assert "leave num_gpus out" in message
    assert "\n" not in message
    assert not (project / "mlruns").exists(), "nothing was opened or recorded"


def test_a_training_function_that_does_not_import_is_refused_first(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config({"train": "tests.train_functions:no_such_function"})
    with pytest.raises(HpsearchError, match="no_such_function"):
        hpsearch.run(path, runner=SimulatedRunner())
    assert not (project / "mlruns").exists()


def test_the_simulated_runner_refuses_a_train_it_has_no_model_of(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config()  # tests.train_functions:quick, a real function
    with pytest.raises(HpsearchError) as raised:
        hpsearch.run(path, runner=SimulatedRunner())
    assert str(raised.value) == (
        f"{path}: train: the simulated runner plays modelled trials of {MODELLED_TRAIN}, "
        f"not tests.train_functions:quick; run it on Ray (--runner ray), or set train: "
        f"{MODELLED_TRAIN}"
    )
    assert not (project / "mlruns").exists()
