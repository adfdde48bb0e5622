"""A define-by-run space function (Ray Tune's ``OptunaSearch(space=fn)``) read as hpsearch's
space: each parameter it suggests, under the choices it suggests it, and its constants."""

from __future__ import annotations

import textwrap
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from hpsearch.config import RunConfig, load_config
from hpsearch.errors import ConfigError

FUNCTIONS = """
def tune_example(trial):
    # Ray's optuna_define_by_run_example.py, as it is.
    activation = trial.suggest_categorical("activation", ["relu", "tanh"])
    trial.suggest_float("width", 0, 20)
    trial.suggest_float("height", -100, 100)
    if activation == "relu":
        trial.suggest_float("mult", 1, 2)
    return {"steps": 100}


def layers(trial):
    # Optuna's own example: a parameter per layer, as many as n_layers.
    n_layers = trial.suggest_int("n_layers", 1, 3)
    for i in range(n_layers):
        trial.suggest_int(f"n_units_l{i}", 4, 128, log=True)
    optimizer = trial.suggest_categorical("optimizer", ["Adam", "SGD"])
    if optimizer == "SGD" and n_layers > 1:
        trial.suggest_float("momentum", 0.0, 0.9)


def on_a_range(trial):
    lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    if lr > 1e-2:
        trial.suggest_float("warmup", 0, 1)


def bounded_by_another(trial):
    width = trial.suggest_int("width", 16, 256)
    trial.suggest_int("bottleneck", 8, width)


def shapes(trial):
    trial.suggest_categorical("shape", [[64, 64], [128]])


def or_of_branches(trial):
    a = trial.suggest_categorical("a", ["x", "y"])
    b = trial.suggest_categorical("b", ["u", "v"])
    if a == "x" or b == "u":
        trial.suggest_float("c", 0, 1)
"""


def _config(project: Path, function: str) -> RunConfig:
    (project / "spacefns.py").write_text(textwrap.dedent(FUNCTIONS))
    (project / f"{function}.yaml").write_text(
        "study: {name: s, n_trials: 2}\n"
        "objective: {metric: acc, direction: maximize}\n"
        "train: tests.train_functions:quick\n"
        f"space: spacefns:{function}\n"
    )
    return load_config(project / f"{function}.yaml")


def test_ray_tunes_define_by_run_example_is_its_branches_and_constants(project: Path) -> None:
    space = _config(project, "tune_example").search_space
    assert space.distributions() == {
        "activation": CategoricalDistribution(("relu", "tanh")),
        "width": FloatDistribution(0.0, 20.0),
        "height": FloatDistribution(-100.0, 100.0),
        "mult": FloatDistribution(1.0, 2.0),
    }
    assert space.params["mult"].when == {"activation": "relu"}
    assert space.constants() == {"steps": 100}
    # The study suggests as the function would: mult in relu's trials only.
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(12):
        params = space.suggest(study.ask())
        assert ("mult" in params) == (params["activation"] == "relu")


def test_a_parameter_per_layer_is_suggested_where_there_are_that_many(project: Path) -> None:
    space = _config(project, "layers").search_space
    params = space.params
    # In the order first suggested (each condition's parameter before it: checked as loaded).
    assert list(params) == [
        "n_layers", "n_units_l0", "optimizer", "n_units_l1", "momentum", "n_units_l2",
    ]  # fmt: skip
    assert space.distributions()["n_layers"] == IntDistribution(1, 3)
    assert params["n_units_l0"].when is None
    assert params["n_units_l1"].when == {"n_layers": [2, 3]}
    assert params["n_units_l2"].when == {"n_layers": 3}
    assert params["momentum"].when == {"n_layers": [2, 3], "optimizer": "SGD"}


@pytest.mark.parametrize(
    ("function", "words"),
    [
        ("on_a_range", "other parameters, or other bounds, at the two ends of a range"),
        ("bounded_by_another", "other parameters, or other bounds"),
        ("or_of_branches", "suggests 'c' under choices that one 'when' cannot name"),
        ("shapes", "suggests 'shape' among list values"),
    ],
)
def test_what_a_space_cannot_say_is_refused_with_the_fix(
    project: Path, function: str, words: str
) -> None:
    with pytest.raises(ConfigError, match=words) as refused:
        _config(project, function)
    fix = "choose among names" if function == "shapes" else "suggest in an Optuna objective"
    assert fix in str(refused.value)


def test_rays_installed_example_is_read_as_it_is(project: Path) -> None:
    example = "ray.tune.examples.optuna_define_by_run_example"
    (project / "ray.yaml").write_text(
        "study: {name: s, n_trials: 2}\n"
        "objective: {metric: mean_loss, direction: minimize}\n"
        f"train: {{tune: {example}:easy_objective}}\n"
        f"space: {example}:define_by_run_func\n"
    )
    space = load_config(project / "ray.yaml").search_space
    assert set(space.distributions()) == {"activation", "width", "height", "mult"}
    assert space.constants() == {"steps": 100}
