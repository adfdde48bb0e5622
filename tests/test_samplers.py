"""Samplers by name, by import path, and the grid a finite space makes."""

from __future__ import annotations

import optuna
import pytest

from hpsearch.config import SamplerSpec
from hpsearch.errors import ConfigError
from hpsearch.samplers import grid_of, make_sampler
from hpsearch.space import CategoricalParam, FloatParam, IntParam, SearchSpace


@pytest.mark.parametrize(
    ("kind", "cls"),
    [
        ("tpe", optuna.samplers.TPESampler),
        ("random", optuna.samplers.RandomSampler),
        ("nsga2", optuna.samplers.NSGAIISampler),
        ("gp", optuna.samplers.GPSampler),
        ("grid", optuna.samplers.GridSampler),
        ("cmaes", optuna.samplers.CmaEsSampler),
        ("qmc", optuna.samplers.QMCSampler),
        ("optuna.samplers:BruteForceSampler", optuna.samplers.BruteForceSampler),
        ("optuna.samplers.RandomSampler", optuna.samplers.RandomSampler),
    ],
)
def test_samplers_by_name_and_path(kind: str, cls: type) -> None:
    assert isinstance(make_sampler(SamplerSpec(type=kind, seed=1)), cls)


def test_sampler_options_are_checked() -> None:
    spec = SamplerSpec(type="tpe", options={"n_startup_trial": 3})
    with pytest.raises(ConfigError) as info:
        make_sampler(spec, "c.yaml")
    assert info.value.key == "study.sampler.options.n_startup_trial"
    assert "n_startup_trials" in str(info.value)


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("nope", "unknown sampler 'nope'"),
        ("tpee", "did you mean 'tpe'?"),
        ("no_such_module.Sampler", "cannot import 'no_such_module'"),
        ("optuna.samplers:NoSuchSampler", "has no class 'NoSuchSampler'"),
        ("optuna.distributions:FloatDistribution", "rejected the options"),
    ],
)
def test_a_wrong_sampler_is_one_line_naming_the_key(kind: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        make_sampler(SamplerSpec(type=kind), "c.yaml")
    assert info.value.key.startswith("study.sampler")
    assert words in str(info.value)
    assert "\n" not in str(info.value)


def test_grid_enumerates_a_finite_space_and_runs_it() -> None:
    space = SearchSpace(
        {
            "act": CategoricalParam(type="categorical", choices=["relu", "gelu"]),
            "width": IntParam(type="int", low=16, high=48, step=16),
            "drop": FloatParam(type="float", low=0.0, high=0.2, step=0.1),
        }
    )
    assert grid_of(space, "c.yaml") == {
        "act": ["relu", "gelu"],
        "width": [16, 32, 48],
        "drop": [0.0, 0.1, 0.2],
    }
    study = optuna.create_study(sampler=make_sampler(SamplerSpec(type="grid"), "c.yaml", space))
    seen = set()
    for _ in range(18 + 1):  # one past the grid: the grid ends no study of hpsearch's
        trial = study.ask()
        seen.add(tuple(space.suggest(trial).values()))
        study.tell(trial, 0.0)
    assert len(seen) == 18
    assert len(study.trials) == 19


def test_grid_refuses_a_continuous_range() -> None:
    space = SearchSpace({"lr": FloatParam(type="float", low=1e-4, high=0.1, log=True)})
    with pytest.raises(ConfigError) as info:
        make_sampler(SamplerSpec(type="grid"), "c.yaml", space)
    assert info.value.key == "space.lr"
    assert "give it a step" in str(info.value)
