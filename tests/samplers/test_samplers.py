"""Samplers by name, by import path, and the grid a finite space makes."""

from __future__ import annotations

from collections import Counter
from typing import Any

import optuna
import pytest

from hpsearch.config import SamplerSpec
from hpsearch.errors import ConfigError
from hpsearch.samplers import grid_of, grid_points, make_sampler
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
    assert str(info.value).endswith(
        "TPESampler takes no option 'n_startup_trial'; did you mean 'n_startup_trials'?"
    )
    far = SamplerSpec(type="random", options={"multivariate": True})
    with pytest.raises(ConfigError, match="takes no option 'multivariate'; valid options: seed"):
        make_sampler(far, "c.yaml")


def keeps_x_at_most_one(trial: optuna.trial.FrozenTrial) -> tuple[float]:
    """A constraint as Optuna's ``constraints_func`` gives it: held at 0 or less."""
    return (trial.params["x"] - 1.0,)


def test_an_option_taken_as_a_function_is_named_as_module_and_function() -> None:
    # Optuna's constrained optimisation, from YAML: constraints_func: module:function.
    named = f"{__name__}:keeps_x_at_most_one"
    spec = SamplerSpec(type="tpe", seed=0, options={"constraints_func": named})
    with pytest.warns(FutureWarning, match="set_constraint"):  # Optuna 5's advice, kept
        sampler = make_sampler(spec, "c.yaml")
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(lambda t: t.suggest_float("x", 0.0, 2.0), n_trials=12)
    assert all(t.constraints for t in study.trials)  # each trial's, as Optuna keeps them
    assert study.best_trial.params["x"] <= 1.0  # the best of those that keep it
    wrong = SamplerSpec(type="tpe", options={"constraints_func": f"{__name__}:keeps_x"})
    with pytest.raises(ConfigError) as info:
        make_sampler(wrong, "c.yaml")
    assert info.value.key == "study.sampler.options.constraints_func"
    assert f"module '{__name__}' has no 'keeps_x'" in str(info.value)


@pytest.mark.parametrize(
    ("kind", "options", "key", "words"),
    [
        # Taken as given, these crashed the search at its first trial, not here.
        ("tpe", {"n_startup_trials": "ten"}, "n_startup_trials", "takes int for "),
        ("tpe", {"n_startup_trials": 2.5}, "n_startup_trials", "not 2.5; give int"),
        ("nsga2", {"crossover": "uniform"}, "crossover", "give the object itself in a dict"),
        ("cmaes", {"independent_sampler": 3}, "independent_sampler", "a sampler section"),
        ("gp", {"independent_sampler": {"type": "randm"}}, "independent_sampler.type", "'random'"),
        ("gp", {"independent_sampler": {"kind": "tpe"}}, "independent_sampler", "kind: Extra"),
    ],
)
def test_an_option_of_the_wrong_type_is_one_line_at_its_key(
    kind: str, options: dict[str, Any], key: str, words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        make_sampler(SamplerSpec(type=kind, options=options), "c.yaml")
    assert info.value.key == f"study.sampler.options.{key}"
    assert words in str(info.value)


def test_a_sampler_an_option_takes_is_a_sampler_section_of_its_own() -> None:
    # CMA-ES and GP sample what they cannot model with their independent_sampler.
    options = {"independent_sampler": {"type": "random", "seed": 3}}
    made = make_sampler(SamplerSpec(type="gp", options=options), "c.yaml")
    assert isinstance(made._independent_sampler, optuna.samplers.RandomSampler)  # type: ignore[attr-defined]
    alone = make_sampler(SamplerSpec(type="cmaes", options={"independent_sampler": "tpe"}))
    assert isinstance(alone._independent_sampler, optuna.samplers.TPESampler)  # type: ignore[attr-defined]
    # Optuna's PartialFixedSampler, by path: some parameters fixed, a base sampler for the rest.
    fixed = {"fixed_params": {"y": 1}, "base_sampler": {"type": "random", "seed": 0}}
    partial = make_sampler(SamplerSpec(type="optuna.samplers.PartialFixedSampler", options=fixed))
    study = optuna.create_study(sampler=partial)
    study.optimize(lambda t: t.suggest_float("x", 0, 1) + t.suggest_int("y", 0, 9), n_trials=3)
    assert [t.params["y"] for t in study.trials] == [1, 1, 1]


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("nope", "unknown sampler 'nope'"),
        ("tpee", "did you mean 'tpe'?"),
        ("TPESampler", "write type: tpe (Optuna's TPESampler), or optuna.samplers.TPESampler"),
        ("GridSampler", "write type: grid (Optuna's GridSampler)"),
        # Optuna's samplers by a word of their own, not the nearest short name's spelling.
        ("nsgaiii", "unknown sampler 'nsgaiii'; write type: optuna.samplers.NSGAIIISampler"),
        ("brute_force", "write type: optuna.samplers.BruteForceSampler"),
        ("nsgaii", "write type: nsga2 (Optuna's NSGAIISampler), or optuna.samplers.NSGAIISampler"),
        ("no_such_module.Sampler", "cannot import 'no_such_module'"),
        ("optuna.samplers:NoSuchSampler", "has no class 'NoSuchSampler'"),
        ("optuna.distributions:FloatDistribution", "FloatDistribution needs the option(s) low"),
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
    for _ in range(18 + 1):  # one past the grid: the sampler stops nothing (the budget does)
        trial = study.ask()
        seen.add(tuple(space.suggest(trial).values()))
        study.tell(trial, 0.0)
    assert len(seen) == 18
    assert len(study.trials) == 19


def test_a_grid_has_the_points_of_its_space_or_of_its_options() -> None:
    space = SearchSpace(
        {
            "act": CategoricalParam(type="categorical", choices=["relu", "gelu"]),
            "width": IntParam(type="int", low=16, high=48, step=16),
        }
    )
    assert grid_points(SamplerSpec(type="grid"), space) == 6
    given = SamplerSpec(type="grid", options={"search_space": {"act": ["relu"], "width": [16]}})
    assert grid_points(given, space) == 1
    assert grid_points(SamplerSpec(type="tpe"), space) is None


def test_grid_refuses_a_continuous_range() -> None:
    space = SearchSpace({"lr": FloatParam(type="float", low=1e-4, high=0.1, log=True)})
    with pytest.raises(ConfigError) as info:
        make_sampler(SamplerSpec(type="grid"), "c.yaml", space)
    assert info.value.key == "space.lr"
    assert "give it a step" in str(info.value)


def _picks(choices: list[Any], draws: int = 300) -> Counter[Any]:
    """How often a seeded TPE picks each choice after good trials at the second and fourth
    choices, worse ones at the rest but the third, which was never tried."""
    sampler = make_sampler(SamplerSpec(type="tpe", seed=0, options={"n_startup_trials": 0}))
    study = optuna.create_study(sampler=sampler, direction="maximize")
    distribution = optuna.distributions.CategoricalDistribution(choices)
    for position, choice in enumerate(choices):
        # TPE's good group here is its best two trials: one at each good choice.
        for _ in range(1 if position in (1, 3) else 3 if position != 2 else 0):
            study.add_trial(
                optuna.trial.create_trial(
                    params={"batch_size": choice},
                    distributions={"batch_size": distribution},
                    value=1.0 if position in (1, 3) else 0.0,
                )
            )
    study.ask()
    trial = study.trials[-1]  # the one being suggested for, as the sampler sees it
    return Counter(
        sampler.sample_independent(study, trial, "batch_size", distribution) for _ in range(draws)
    )


def test_tpe_learns_numeric_choices_as_a_scale_and_names_apart() -> None:
    numbers = _picks([16, 32, 64, 128, 256, 512, 1024])
    names = _picks(["16", "32", "64", "128", "256", "512", "1024"])

    # Ranked: what 32 and 128 taught weighs on 64, between them.
    assert numbers.most_common(1)[0][0] == 64, numbers
    # Names are learnt apart: "64", never tried, has only the prior.
    assert names["64"] < min(names["32"], names["128"]) / 2, names
