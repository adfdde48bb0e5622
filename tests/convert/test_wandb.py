"""A W&B sweep becomes a config that hpsearch reads as the sweep meant it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from hpsearch import TrialContext
from hpsearch.adapters import command_line, run_command
from hpsearch.config import load_config
from hpsearch.convert import convert
from hpsearch.errors import ConfigError

SWEEP = """\
program: train.py
method: bayes
name: mnist-sweep
project: mnist
metric: {name: val_loss, goal: minimize}
parameters:
  learning_rate: {min: 0.0001, max: 0.1, distribution: log_uniform_values}
  decay: {min: -9.0, max: -2.0, distribution: log_uniform}
  optimizer: {values: [adam, sgd]}
  epochs: {value: 5}
  layers: {min: 1, max: 4}
  dropout: {min: 0.0, max: 0.5}
  batch_size: {distribution: q_uniform, min: 16, max: 128, q: 16}
early_terminate: {type: hyperband, max_iter: 27, s: 2, eta: 3}
run_cap: 30
"""


def _sweep(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    return path


def test_a_sweep_becomes_a_config_hpsearch_runs(tmp_path: Path) -> None:
    source = _sweep(tmp_path, SWEEP)
    converted = convert(source)
    assert converted.missing == []
    written = tmp_path / "hpsearch.yaml"
    written.write_text(converted.text(source))

    config = load_config(written)  # read as `hpsearch run` reads it
    assert config.study.name == "mnist-sweep"
    assert config.study.sampler.type == "tpe"
    assert config.study.n_trials == 30
    assert config.study.pruner.type == "hyperband"
    # W&B's brackets below max_iter: 27 / 3**2.
    assert config.study.pruner.options == {
        "reduction_factor": 3,
        "max_resource": 27,
        "min_resource": 3,
    }
    assert [(o.metric, o.direction) for o in config.objective_list] == [("val_loss", "minimize")]
    assert config.command is not None
    assert config.command.command == "python train.py {args}"
    assert config.tracking.experiment == "mnist"
    space = config.search_space
    dists = space.distributions()
    assert dists["learning_rate"] == FloatDistribution(0.0001, 0.1, log=True)
    # log_uniform's bounds are exponents of e.
    assert dists["decay"] == FloatDistribution(math.exp(-9.0), math.exp(-2.0), log=True)
    assert dists["optimizer"] == CategoricalDistribution(("adam", "sgd"))
    assert space.constants() == {"epochs": 5}
    assert dists["layers"] == IntDistribution(1, 4)  # W&B: int bounds, int_uniform
    assert dists["dropout"] == FloatDistribution(0.0, 0.5)
    assert dists["batch_size"] == IntDistribution(16, 128, step=16)  # q_uniform of integers


def test_a_quantized_log_range_is_searched_on_its_log_range_with_a_note(tmp_path: Path) -> None:
    # W&B's own sweep example: a batch size, quantized log uniform.
    source = _sweep(
        tmp_path,
        "parameters:\n"
        "  batch_size: {distribution: q_log_uniform_values, q: 8, min: 32, max: 256}\n"
        "  lr: {distribution: q_log_uniform_values, q: 0.001, min: 0.001, max: 0.1}\n"
        "  decay: {distribution: q_log_uniform, min: -9, max: -2}\n",
    )
    converted = convert(source)
    assert converted.config["space"] == {
        "batch_size": {"type": "int", "low": 32, "high": 256, "log": True},
        "lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True},
        "decay": {"type": "float", "low": math.exp(-9), "high": math.exp(-2), "log": True},
    }
    stepless = [note for note in converted.notes if "without its step" in note]
    assert [note.split(":")[0] for note in stepless] == [
        "parameters.batch_size",
        "parameters.lr",
        "parameters.decay",
    ]
    assert "q=8" in stepless[0]


def test_a_grid_sweeps_whole_grid(tmp_path: Path) -> None:
    source = _sweep(
        tmp_path,
        "method: grid\nparameters:\n  a: {values: [1, 2, 3]}\n  b: {values: [x, y]}\n"
        "  c: {value: 0}\nmetric: {name: acc, goal: maximize}\n"
        "command: [python, t.py, '${args}']\n",
    )
    converted = convert(source)
    assert converted.config["study"] == {
        "name": "sweep",
        "sampler": {"type": "grid"},
        "n_trials": 6,
    }
    assert converted.config["train"]["command"] == "python t.py {args}"


def test_w_and_bs_hydra_example_converts_with_its_dotted_parameter_and_overrides(
    tmp_path: Path,
) -> None:
    # W&B's own command example: Hydra overrides for a dotted parameter.
    source = _sweep(
        tmp_path,
        "program: main.py\nmethod: bayes\nrun_cap: 8\nmetric: {name: val_loss, goal: minimize}\n"
        "parameters:\n  optimizer.config.learning_rate: {min: 0.00001, max: 0.1}\n"
        "  optimizer: {values: [sgd, adam]}\n"
        "command: ['${env}', '${interpreter}', '${program}', '${args_no_hyphens}']\n",
    )
    converted = convert(source)
    assert converted.config["train"]["command"] == "python main.py {args_no_hyphens}"
    written = tmp_path / "converted.yaml"
    written.write_text(yaml.safe_dump(converted.config))
    config = load_config(written)
    assert config.command is not None
    assert command_line(config.command, {"optimizer.config.learning_rate": 0.01})[1:] == [
        "main.py",
        "optimizer.config.learning_rate=0.01",
    ]


# W&B's nested parameters (its docs' "double nested" example's shape), as a script
# reads them: wandb.config["optimizer"]["nadam"]["beta"], its own defaults beside them.
NESTED = """\
program: train.py
method: grid
metric: {name: loss, goal: minimize}
parameters:
  epochs: {value: 2}
  optimizer:
    parameters:
      lr: {values: [0.1, 0.01]}
      nadam:
        parameters:
          beta: {values: [0.9, 0.99, 0.999]}
"""

NESTED_SCRIPT = """\
import wandb

with wandb.init(config={"optimizer": {"lr": 1.0, "decay": 0.5}, "seed": 3}) as run:
    config = run.config
    print("config", dict(config))
    optimizer = config["optimizer"]
    wandb.log({"loss": optimizer["lr"] * optimizer["nadam"]["beta"] + optimizer["decay"]})
"""


@pytest.mark.process  # a converted trial's script runs
def test_nested_parameters_are_searched_by_dotted_names_and_nested_in_wandb_config(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    source = _sweep(tmp_path, NESTED)
    converted = convert(source)
    assert converted.config["space"] == {
        "epochs": 2,
        "optimizer.lr": [0.1, 0.01],
        "optimizer.nadam.beta": [0.9, 0.99, 0.999],
    }
    assert converted.config["study"]["n_trials"] == 6  # the whole grid, nested included
    assert converted.config["train"]["env"] == {"HPSEARCH_WANDB_NESTED": "optimizer"}
    assert any(note.startswith("Nested parameters (optimizer)") for note in converted.notes)
    written = tmp_path / "converted.yaml"
    written.write_text(converted.text(source))
    config = load_config(written)
    assert set(config.search_space.distributions()) == {"optimizer.lr", "optimizer.nadam.beta"}

    # The converted command runs the script as a trial: wandb.config holds the group
    # nested, the sweep's values over the script's defaults, its other defaults kept.
    assert config.command is not None
    params = {"epochs": 2, "optimizer.lr": 0.1, "optimizer.nadam.beta": 0.9}
    ctx = TrialContext.local()
    (tmp_path / "train.py").write_text(NESTED_SCRIPT)
    spec = config.command.model_copy(update={"command": ["python", str(tmp_path / "train.py")]})
    run_command(spec, params, ctx, workdir=str(tmp_path), trial_dir=str(tmp_path / "trial"))
    said = capfd.readouterr().out
    assert (
        "config {'epochs': 2, 'optimizer': {'lr': 0.1, 'decay': 0.5, 'nadam': {'beta': 0.9}}, "
        "'seed': 3}" in said
    ), said
    assert ctx.history[-1].metrics["loss"] == pytest.approx(0.1 * 0.9 + 0.5)

    # --train given instead: the command still gets the group named.
    given = convert(source, train="python other.py {args}")
    assert given.config["train"]["env"] == {"HPSEARCH_WANDB_NESTED": "optimizer"}


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            "parameters: {lr: {distribution: normal, mu: 0, sigma: 1}}",
            "parameters.lr.distribution: 'normal'",
        ),
        (
            "parameters: {lr: {values: [1, 2], probabilities: [0.5, 0.5]}}",
            "parameters.lr.probabilities",
        ),
        (
            "parameters: {lr: {min: 0.1, max: 1.0, distribution: inv_log_uniform_values}}",
            "parameters.lr.distribution: 'inv_log_uniform_values'",
        ),
        (
            "parameters: {a: {value: 1, parameters: {b: {value: 1}}}}",
            "parameters.a.value: beside parameters",
        ),
        (
            "parameters: {a.b: {value: 1}, a: {parameters: {b: {value: 2}}}}",
            "parameters.a.parameters.b: is the parameter a.b a second time",
        ),
        ("parameters: {a: {parameters: {}}}", "parameters.a.parameters: must map"),
        ("metric: {name: acc, target: 0.9}\nparameters: {a: {value: 1}}", "metric.target"),
        (
            "method: grid\nparameters: {a: {min: 1, max: 3}}",
            "parameters.a: method grid takes values",
        ),
        (
            "parameters: {a: {value: 1}}\ncommand: [python, t.py, '${envvar:HOME}']",
            "command.2: ${envvar:HOME}",
        ),
        (
            "parameters: {a: {min: 0.1, max: 1.0, distribution: q_uniform, q: 0.2}}",
            "whole number of steps",
        ),
        ("parameters: {a: {value: 1}}\nscheduler: x", "scheduler: has no hpsearch equivalent"),
        ("method: anneal\nparameters: {a: {value: 1}}", "method: 'anneal'"),
        (
            "study: {name: s}\ntrain: m:f\nspace: {a: [1, 2]}",
            "is an hpsearch config already, not a W&B sweep or an NNI experiment; run it as it "
            "is: hpsearch run",
        ),
    ],
)
def test_what_hpsearch_cannot_search_is_one_line_naming_its_key(
    tmp_path: Path, text: str, where: str
) -> None:
    source = _sweep(tmp_path, text + "\n")
    with pytest.raises(ConfigError) as caught:
        convert(source)
    message = str(caught.value)
    assert message.startswith(str(source)), message
    assert where in message, message
    assert "\n" not in message


def test_a_sweep_without_a_program_or_budget_says_what_to_add(tmp_path: Path) -> None:
    source = _sweep(tmp_path, "parameters: {a: {min: 0.0, max: 1.0}}\n")
    converted = convert(source)
    assert converted.missing == ["train", "objective", "study.n_trials"]
    assert "# Still to add: train, objective, study.n_trials" in converted.text(source)
    # What the command line gives completes it.
    whole = convert(source, train="mod:train", metric="loss", direction="minimize", n_trials=5)
    assert whole.missing == []
    assert whole.config["train"] == "mod:train"
    assert whole.config["objective"] == {"metric": "loss", "direction": "minimize"}


def test_a_sweep_without_run_cap_asks_for_n_trials_unless_given(tmp_path: Path) -> None:
    source = _sweep(tmp_path, "method: random\nparameters: {a: {min: 0.0, max: 1.0}}\n")
    assert convert(source).missing == ["train", "objective", "study.n_trials"]
    given = convert(source, train="python t.py {args}", metric="acc", n_trials=5)
    assert given.missing == []
    assert given.config["study"]["n_trials"] == 5
    text = given.text(source)
    assert "run_cap" not in text  # no note that the search runs until stopped
    assert "Still to add" not in text
