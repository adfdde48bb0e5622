"""The search-space syntax and its Optuna distributions."""

from __future__ import annotations

import re
from typing import Any

import optuna
import pytest
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from pydantic import TypeAdapter, ValidationError

from hpsearch.space import (
    CategoricalParam,
    ConstantParam,
    FloatParam,
    IntParam,
    ParamSpec,
    SearchSpace,
    expand_shorthand,
)

_ADAPTER: TypeAdapter[ParamSpec] = TypeAdapter(ParamSpec)


def _spec(value: object) -> ParamSpec:
    return _ADAPTER.validate_python(expand_shorthand(value))


def test_distributions_match_the_syntax() -> None:
    space = SearchSpace(
        {
            "lr": _spec({"type": "float", "low": 1e-4, "high": 0.1, "log": True}),
            "drop": _spec({"type": "float", "low": 0.0, "high": 0.5, "step": 0.1}),
            "width": _spec({"type": "int", "low": 16, "high": 256, "step": 16}),
            "depth": _spec({"type": "int", "low": 1, "high": 8, "log": True}),
            "act": _spec(["relu", "gelu"]),
            "epochs": _spec(10),
        }
    )
    assert space.distributions() == {
        "lr": FloatDistribution(1e-4, 0.1, log=True),
        "drop": FloatDistribution(0.0, 0.5, step=0.1),
        "width": IntDistribution(16, 256, step=16),
        "depth": IntDistribution(1, 8, log=True),
        "act": CategoricalDistribution(("relu", "gelu")),
    }
    assert space.constants() == {"epochs": 10}
    sampled = {"lr": 0.01, "drop": 0.2, "width": 32, "depth": 2, "act": "relu"}
    assert list(space.trial_params(sampled)) == ["lr", "drop", "width", "depth", "act", "epochs"]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"type": "float", "low": 1.0, "high": 0.5}, "greater than high"),
        ({"type": "float", "low": 0.0, "high": 1.0, "log": True}, "needs low > 0"),
        ({"type": "int", "low": 0, "high": 8, "log": True}, "needs low > 0"),
        (
            {"type": "float", "low": 0.1, "high": 1.0, "log": True, "step": 0.1},
            "cannot be combined",
        ),
        ({"type": "int", "low": 1, "high": 10, "step": 4}, "set high to 9"),
        ({"type": "float", "low": 0.0, "high": 1.0, "step": 0.3}, "set high to 0.9"),
        ({"type": "float", "low": 0.0, "high": 1.0, "step": -0.1}, "step must be > 0"),
        ({"type": "categorical", "choices": []}, "choices is empty"),
        ({"type": "categorical", "choices": [1, 2, 1]}, "listed twice"),
        ([[16, 32], [32, 64]], r"choice \[16, 32\] is a list; a choice is a number"),
        ({"type": "categorical", "choices": [1, {"a": 1}]}, "choice {'a': 1} is a mapping"),
        ({"type": "float", "high": 1.0}, "Field required"),
    ],
)
def test_ill_formed_ranges_are_rejected(spec: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        _spec(spec)


def _distribution(value: object) -> BaseDistribution:
    spec = _spec(value)
    assert not isinstance(spec, ConstantParam)
    return spec.distribution()


def test_true_and_one_are_different_choices() -> None:
    assert _distribution([1, True]) == CategoricalDistribution((1, True))


def test_low_equal_high_is_allowed() -> None:
    assert _distribution({"type": "int", "low": 3, "high": 3}) == IntDistribution(3, 3)


def test_a_mapping_without_type_is_not_a_constant() -> None:
    with pytest.raises(ValidationError, match="Unable to extract tag"):
        _spec({"low": 1, "high": 2})


def test_a_conditional_space_suggests_only_the_active_branch() -> None:
    space = SearchSpace(
        {
            "optimizer": _spec(["sgd", "adam"]),
            "momentum": _spec(
                {"type": "float", "low": 0.0, "high": 0.9, "when": {"optimizer": "sgd"}}
            ),
            "beta1": _spec(
                {"type": "categorical", "choices": [0.9, 0.99], "when": {"optimizer": "adam"}}
            ),
            "nesterov": _spec({"type": "constant", "value": True, "when": {"optimizer": ["sgd"]}}),
            "epochs": _spec(3),
        }
    )
    assert space.conditional
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(12):
        trial = study.ask()
        sampled = space.suggest(trial)
        assert sampled == trial.params
        params = space.trial_params(sampled)
        if sampled["optimizer"] == "sgd":
            assert set(params) == {"optimizer", "momentum", "nesterov", "epochs"}
        else:
            assert set(params) == {"optimizer", "beta1", "epochs"}
        seen.add(sampled["optimizer"])
        study.tell(trial, 0.0)
    assert seen == {"sgd", "adam"}


def test_a_trial_to_enqueue_is_flat_names_each_a_value_its_parameter_can_take() -> None:
    space = SearchSpace(
        {
            "opt.lr": FloatParam(type="float", low=1e-4, high=1e-1, log=True),
            "width": IntParam(type="int", low=16, high=64, step=16),
            "act": CategoricalParam(type="categorical", choices=["relu", "gelu"]),
            "epochs": ConstantParam(type="constant", value=3),
        }
    )
    # A Tune points_to_evaluate entry is nested, as its param_space is.
    assert space.fixed({"opt": {"lr": 0.01}, "width": 48}) == {"opt.lr": 0.01, "width": 48}
    assert space.fixed({"act": "gelu"}) == {"act": "gelu"}
    refused: dict[str, dict[str, Any]] = {
        "'lrr' is not in space; give values of searched parameters (opt.lr, width, act)": {
            "lrr": 1
        },
        "'epochs' is a constant": {"epochs": 3},
        "opt.lr: 0.5 is not a number in [0.0001, 0.1]": {"opt": {"lr": 0.5}},
        "width: 40 is not an integer in [16, 64] on its step 16 from 16": {"width": 40},
        "width: 32.0 is not an integer": {"width": 32.0},
        "width: True is not an integer": {"width": True},
        "act: 'tanh' is not one of its choices: 'relu', 'gelu'": {"act": "tanh"},
    }
    for words, given in refused.items():
        with pytest.raises(ValueError, match=re.escape(words)):
            space.fixed(given)
