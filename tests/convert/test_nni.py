"""An NNI search space becomes a config's space, nested choices as branches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest

from hpsearch import TrialContext
from hpsearch.adapters import run_command
from hpsearch.config import load_config
from hpsearch.convert import convert
from hpsearch.errors import ConfigError

SPACE = {
    "dropout_rate": {"_type": "uniform", "_value": [0.5, 0.9]},
    "conv_size": {"_type": "choice", "_value": [2, 3, 5, 7]},
    "hidden_size": {"_type": "randint", "_value": [124, 1024]},
    "learning_rate": {"_type": "loguniform", "_value": [0.0001, 0.1]},
    "momentum_step": {"_type": "quniform", "_value": [0, 1, 0.25]},
    "optimizer": {
        "_type": "choice",
        "_value": [
            {"_name": "sgd", "momentum": {"_type": "uniform", "_value": [0, 0.9]}},
            {"_name": "adam"},
        ],
    },
}


def _space_file(folder: Path, space: dict[str, Any]) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / "search_space.json"
    path.write_text(json.dumps(space))
    return path


def test_a_search_space_becomes_a_space_with_its_branches(tmp_path: Path) -> None:
    source = _space_file(tmp_path / "mnist-pytorch", SPACE)
    converted = convert(source, train="python mnist.py {args}", metric="accuracy", n_trials=10)
    written = tmp_path / "hpsearch.yaml"
    written.write_text(converted.text(source))

    config = load_config(written)
    assert config.study.name == "mnist-pytorch"  # the folder, as NNI's examples are named
    space = config.search_space
    dists = space.distributions()
    assert dists["conv_size"] == optuna.distributions.CategoricalDistribution((2, 3, 5, 7))
    # randint's upper bound is excluded.
    assert dists["hidden_size"] == optuna.distributions.IntDistribution(124, 1023)
    assert dists["learning_rate"] == optuna.distributions.FloatDistribution(0.0001, 0.1, log=True)
    assert dists["momentum_step"] == optuna.distributions.FloatDistribution(0.0, 1.0, step=0.25)
    assert dists["dropout_rate"] == optuna.distributions.FloatDistribution(0.5, 0.9)
    # A nested choice: momentum exists only when the optimizer is sgd.
    assert dists["optimizer"] == optuna.distributions.CategoricalDistribution(("sgd", "adam"))
    assert space.conditional
    assert space.params["optimizer.sgd.momentum"].when == {"optimizer": "sgd"}
    assert converted.config["train"]["env"] == {"HPSEARCH_NNI_NESTED": "optimizer"}


# NNI's own nested search space (examples/trials/mnist-nested-search-space), shortened:
# two branches of layer0 each have a pooling_size, and layer0 and layer1 a kernel_size.
NESTED = {
    "layer0.scale": {"_type": "uniform", "_value": [0, 1]},  # a dotted name of its own
    "layer0": {
        "_type": "choice",
        "_value": [
            {"_name": "Empty"},
            {"_name": "Conv", "kernel_size": {"_type": "choice", "_value": [1, 2, 3, 5]}},
            {"_name": "Max_pool", "pooling_size": {"_type": "choice", "_value": [2, 3, 5]}},
            {"_name": "Avg_pool", "pooling_size": {"_type": "choice", "_value": [2, 3, 5]}},
        ],
    },
    "layer1": {
        "_type": "choice",
        "_value": [
            {"_name": "Empty"},
            {
                "_name": "Conv",
                "kernel_size": {"_type": "choice", "_value": [1, 2]},
                "act": {  # a nested choice in a branch
                    "_type": "choice",
                    "_value": [
                        {"_name": "relu"},
                        {"_name": "prelu", "alpha": {"_type": "uniform", "_value": [0, 1]}},
                    ],
                },
            },
        ],
    },
}

NESTED_SCRIPT = """\
import nni

params = nni.get_next_parameter()
print("params", params)
nni.report_final_result(len(params["layer0"]))
"""


@pytest.mark.process  # a converted trial's script runs
def test_nnis_nested_example_converts_and_its_script_gets_nnis_nested_dicts(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    source = _space_file(tmp_path, NESTED)
    converted = convert(source, train="python train.py", n_trials=4)
    assert converted.config["train"]["env"] == {
        "HPSEARCH_NNI_NESTED": "layer0,layer1,layer1.Conv.act"
    }
    written = tmp_path / "hpsearch.yaml"
    written.write_text(converted.text(source))
    config = load_config(written)
    params = config.search_space.params
    assert params["layer0.Max_pool.pooling_size"].when == {"layer0": "Max_pool"}
    assert params["layer0.Avg_pool.pooling_size"].when == {"layer0": "Avg_pool"}
    assert params["layer1.Conv.act.prelu.alpha"].when == {
        "layer1": "Conv",
        "layer1.Conv.act": "prelu",
    }

    # A trial as the sampler draws one: only the chosen branches' parameters.
    (tmp_path / "train.py").write_text(NESTED_SCRIPT)
    assert config.command is not None
    spec = config.command.model_copy(update={"command": ["python", str(tmp_path / "train.py")]})
    drawn = {
        "layer0.scale": 0.5,
        "layer0": "Avg_pool",
        "layer0.Avg_pool.pooling_size": 3,
        "layer1": "Conv",
        "layer1.Conv.kernel_size": 2,
        "layer1.Conv.act": "prelu",
        "layer1.Conv.act.prelu.alpha": 0.25,
    }
    final = run_command(
        spec, drawn, TrialContext.local(), workdir=str(tmp_path), trial_dir=str(tmp_path / "t")
    )
    said = capfd.readouterr().out
    assert (
        "params {'layer0.scale': 0.5, 'layer0': {'_name': 'Avg_pool', 'pooling_size': 3}, "
        "'layer1': {'_name': "
        "'Conv', 'kernel_size': 2, 'act': {'_name': 'prelu', 'alpha': 0.25}}}" in said
    ), said
    assert final == {"default": 2}


def test_a_quantized_log_range_is_searched_on_its_log_range_with_a_note(tmp_path: Path) -> None:
    source = _space_file(
        tmp_path,
        {
            "batch_size": {"_type": "qloguniform", "_value": [16, 512, 16]},
            "lr": {"_type": "qloguniform", "_value": [0.001, 0.1, 0.001]},
        },
    )
    converted = convert(source, train="python mnist.py {args}", metric="accuracy", n_trials=4)
    assert converted.config["space"] == {
        "batch_size": {"type": "int", "low": 16, "high": 512, "log": True},
        "lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True},
    }
    stepless = [note for note in converted.notes if "without its step" in note]
    assert [note.split(":")[0] for note in stepless] == ["batch_size", "lr"]


@pytest.mark.parametrize(
    ("space", "where"),
    [
        ({"lr": {"_type": "qlognormal", "_value": [0, 1, 1]}}, "lr._type: 'qlognormal'"),
        ({"lr": {"_type": "normal", "_value": [0, 1]}}, "lr._type: 'normal'"),
        ({"lr": {"_type": "uniform", "_value": [0.1]}}, "lr._value: uniform takes 2 numbers"),
        ({"lr": {"_value": [0.1, 1]}}, 'lr: must be {"_type"'),
        ({"a": {"_type": "choice", "_value": [1, {"_name": "x"}]}}, "a._value: a nested choice"),
    ],
)
def test_what_hpsearch_cannot_search_is_one_line_naming_its_entry(
    tmp_path: Path, space: dict[str, Any], where: str
) -> None:
    source = _space_file(tmp_path, space)
    with pytest.raises(ConfigError) as caught:
        convert(source)
    message = str(caught.value)
    assert message.startswith(str(source)), message
    assert where in message, message


def test_the_objective_is_nnis_default_metric_maximised_unless_told(tmp_path: Path) -> None:
    source = _space_file(tmp_path / "mnist-pytorch", SPACE)
    converted = convert(source, train="python mnist.py")  # the trial script, unchanged
    assert converted.config["objective"] == {"metric": "default", "direction": "maximize"}
    assert converted.missing == ["study.n_trials"]
    assert any("nni.get_next_parameter()" in note for note in converted.notes)
    told = convert(source, metric="loss", direction="minimize")
    assert told.config["objective"] == {"metric": "loss", "direction": "minimize"}
