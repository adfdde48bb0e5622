"""An NNI experiment's config.yml becomes a whole config: space, trial command, budget, tuner."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from hpsearch.config import load_config
from hpsearch.convert import convert
from hpsearch.errors import ConfigError

# NNI's own example, examples/trials/mnist-pytorch/config.yml (NNI 2.10), with an assessor.
CONFIG = """
searchSpaceFile: search_space.json
trialCommand: python3 mnist.py
trialGpuNumber: 0
trialConcurrency: 2
maxTrialNumber: 10
maxExperimentDuration: 1h
tuner:
  name: TPE
  classArgs:
    optimize_mode: maximize
    seed: 7
assessor:
  name: Medianstop
  classArgs: {optimize_mode: maximize, start_step: 3}
trainingService:
  platform: local
  useActiveGpu: false
"""
SPACE = {
    "batch_size": {"_type": "choice", "_value": [16, 32, 64, 128]},
    "hidden_size": {"_type": "choice", "_value": [128, 256, 512, 1024]},
    "lr": {"_type": "choice", "_value": [0.0001, 0.001, 0.01, 0.1]},
    "momentum": {"_type": "uniform", "_value": [0, 1]},
}


def _experiment(folder: Path, config: str = CONFIG) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "search_space.json").write_text(json.dumps(SPACE))
    path = folder / "config.yml"
    path.write_text(textwrap.dedent(config))
    return path


def test_nnis_mnist_experiment_becomes_a_config_that_runs_its_trial_script_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _experiment(tmp_path / "mnist-pytorch")
    monkeypatch.chdir(source.parent)  # NNI runs the trial command in its code directory
    converted = convert(source)
    assert converted.missing == []
    written = source.parent / "hpsearch.yaml"
    written.write_text(converted.text(source))
    config = load_config(written)
    assert config.study.name == "mnist-pytorch"
    assert config.study.n_trials == 10
    assert config.study.timeout == 3600
    assert (config.study.sampler.type, config.study.sampler.seed) == ("tpe", 7)
    assert (config.study.pruner.type, config.study.pruner.options) == (
        "median",
        {"n_warmup_steps": 3},
    )
    assert [(o.metric, o.direction) for o in config.objective_list] == [("default", "maximize")]
    assert converted.config["train"] == {"command": "python3 mnist.py"}
    assert (config.execution.max_concurrent, config.execution.num_gpus) == (2, 0)
    assert set(config.search_space.params) == set(SPACE)
    assert not any("Run hpsearch in" in note for note in converted.notes)
    assert any("trainingService.useActiveGpu" in note for note in converted.notes)


def test_a_hyperband_tuner_minimising_is_random_sampling_and_optunas_hyperband(
    tmp_path: Path,
) -> None:
    source = _experiment(
        tmp_path / "hb",
        """
        experimentName: hb-search
        searchSpace:
          lr: {_type: loguniform, _value: [0.0001, 0.1]}
        trialCommand: python train.py
        trialCodeDirectory: code
        maxTrialDuration: 30m
        tuner:
          name: Hyperband
          classArgs: {optimize_mode: minimize, R: 60, eta: 3, exec_mode: parallelism}
        """,
    )
    converted = convert(source)
    study = converted.config["study"]
    assert study["name"] == "hb-search"
    assert study["sampler"] == {"type": "random"}
    assert study["pruner"] == {
        "type": "hyperband",
        "options": {"reduction_factor": 3, "max_resource": 60},
    }
    assert converted.config["objective"] == {"metric": "default", "direction": "minimize"}
    assert converted.config["execution"] == {"trial_timeout": 1800.0}
    assert converted.config["space"] == {
        "lr": {"type": "float", "low": 0.0001, "high": 0.1, "log": True}
    }
    code = (source.parent / "code").resolve()
    assert f"Run hpsearch in {code}: NNI runs the trial command there." in converted.notes
    assert any("exec_mode: no Optuna equivalent" in note for note in converted.notes)
    assert os.getcwd() != str(code)


@pytest.mark.parametrize(
    ("config", "where"),
    [
        ("searchSpaceFile: search_space.json\ntuner: {name: PBT}\n", "tuner.name"),
        ("searchSpaceFile: search_space.json\nassessor: {name: Curvefitting}\n", "assessor.name"),
        ("searchSpaceFile: search_space.json\ntrialGpuNumber: 2\n", "trialGpuNumber"),
        ("searchSpaceFile: search_space.json\nuseAnnotation: true\n", "useAnnotation"),
        ("searchSpaceFile: search_space.json\nsearchSpaceTypo: 1\n", "searchSpaceTypo"),
        ("searchSpacePath: search_space.json\nmaxTrialNum: 3\n", "NNI 1's config format"),
        ("searchSpaceFile: missing.json\n", "searchSpaceFile"),
    ],
)
def test_what_would_search_or_run_something_else_is_one_line_naming_its_key(
    tmp_path: Path, config: str, where: str
) -> None:
    source = _experiment(tmp_path, config)
    with pytest.raises(ConfigError) as caught:
        convert(source)
    message = str(caught.value)
    assert message.startswith(str(source)), message
    assert where in message, message
