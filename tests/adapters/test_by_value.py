"""Functions a dict config holds itself: named where a worker imports them, else sent by value."""

from __future__ import annotations

import base64
import threading
from typing import Any

import cloudpickle  # type: ignore[import-untyped]  # no stubs
import optuna
import pytest
from ray import tune

from hpsearch.adapters import (
    check_train,
    install_pickles,
    pickles_of,
    resolve_train_function,
)
from hpsearch.config import load_config
from hpsearch.errors import ConfigError
from hpsearch.samplers import make_sampler
from hpsearch.trial.context import TrialContext
from tests.train_functions import chatty

SECTIONS: dict[str, Any] = {
    "study": {"name": "notebook", "n_trials": 2},
    "objective": {"metric": "loss", "direction": "minimize"},
    "space": {"lr": {"type": "float", "low": 0.01, "high": 1.0}},
}


def test_a_modules_own_function_is_named_as_a_file_would_name_it() -> None:
    config = load_config({**SECTIONS, "train": chatty})
    assert config.train_target == "tests.train_functions:chatty"
    assert pickles_of([config.train_target]) == {}  # each worker imports it


def test_a_function_no_worker_could_import_travels_by_value_and_runs_after_install() -> None:
    def train(params: dict[str, Any], ctx: TrialContext) -> float:  # as in a notebook
        return float(params["lr"]) * 2

    config = load_config({**SECTIONS, "train": train})
    spec = config.train_target
    test = "test_a_function_no_worker_could_import_travels_by_value_and_runs_after_install"
    assert spec == f"{__name__}:{test}_locals_train"  # a name a config could hold
    [(name, pickled)] = pickles_of([spec, "tests.train_functions:chatty"]).items()
    assert name == spec
    # What a worker does: installs the pickle under its name, then resolves that name.
    install_pickles({"worker:train": pickled})
    assert resolve_train_function("worker:train")({"lr": 0.25}, None) == 0.5
    check_train(spec, None, "<dict>")  # the driver's check finds it too


def test_each_function_slot_of_a_dict_takes_the_function_itself() -> None:
    def objective(trial: Any) -> float:
        return float(trial.suggest_float("x", 0.0, 1.0))

    def trainable(config: dict[str, Any]) -> None:
        tune.report({"loss": config["lr"]})

    class Stepper(tune.Trainable):
        def step(self) -> dict[str, float]:
            return {"loss": 1.0}

    optuna = load_config({**SECTIONS, "train": {"optuna": objective}})
    assert optuna.optuna_objective is not None
    assert optuna.optuna_objective.endswith("_locals_objective")
    for given in (trainable, Stepper):
        config = load_config({**SECTIONS, "train": {"tune": given, "stop": {"x": 1}}})
        assert config.tune_trainable is not None
        assert pickles_of([config.tune_trainable])
        assert resolve_train_function(config.tune_trainable, trainable=True) is given


def test_a_samplers_function_option_in_a_dict_is_named_and_the_sampler_gets_it_back() -> None:
    def constraints(trial: Any) -> tuple[float]:
        return (trial.params["x"] - 0.5,)

    sampler = {"type": "tpe", "options": {"constraints_func": constraints}}
    config = load_config(
        {**SECTIONS, "train": chatty, "study": {**SECTIONS["study"], "sampler": sampler}}
    )
    named = config.study.sampler.options["constraints_func"]
    assert named.endswith("_locals_constraints")  # a name the study can record
    with pytest.warns(FutureWarning, match="set_constraint"):  # Optuna 5's advice
        sampler_made = make_sampler(config.study.sampler)
    assert sampler_made._constraints_func is constraints  # type: ignore[attr-defined]


def test_a_samplers_object_option_in_a_dict_is_the_samplers_and_recorded_by_its_class() -> None:
    # CMA-ES's independent_sampler as Optuna's users give it; the study records the
    # config as JSON, which held no sampler: the search failed before its first trial.
    random = optuna.samplers.RandomSampler(seed=1)
    sampler = {"type": "cmaes", "options": {"independent_sampler": random}}
    config = load_config(
        {**SECTIONS, "train": chatty, "study": {**SECTIONS["study"], "sampler": sampler}}
    )
    recorded = config.model_dump(mode="json")["study"]["sampler"]["options"]
    assert recorded == {"independent_sampler": "<RandomSampler object>"}
    assert make_sampler(config.study.sampler)._independent_sampler is random  # type: ignore[attr-defined]


def test_a_function_that_cannot_be_pickled_is_one_line_naming_the_key() -> None:
    lock = threading.Lock()

    def holds(params: dict[str, Any], ctx: TrialContext) -> None:
        with lock:
            pass

    with pytest.raises(ConfigError) as info:
        load_config({**SECTIONS, "train": holds})
    said = str(info.value)
    assert said.startswith("<dict>: train: 'holds' cannot be sent to the trials' workers")
    assert "cannot pickle '_thread.lock' object" in said
    assert "\n" not in said


def test_a_class_trainable_given_as_train_is_told_the_dicts_own_fix() -> None:
    class Stepper(tune.Trainable):
        def step(self) -> dict[str, float]:
            return {"loss": 1.0}

    config = load_config({**SECTIONS, "train": Stepper})
    with pytest.raises(ConfigError, match=r'write "train": \{"tune": .*Stepper\}'):
        check_train(config.train_target, None, "<dict>")


def test_a_dicts_space_may_hold_optuna_distributions_as_optuna_search_cv_takes_them() -> None:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    space = {
        "lr": FloatDistribution(1e-4, 1e-1, log=True),
        "dropout": FloatDistribution(0.0, 0.5, step=0.1),
        "layers": IntDistribution(1, 4),
        "act": CategoricalDistribution(["relu", "tanh"]),
    }
    config = load_config({**SECTIONS, "train": chatty, "space": space})
    written = {name: spec.model_dump(exclude_defaults=True) for name, spec in config.space.items()}
    assert written == {
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
        "dropout": {"type": "float", "low": 0.0, "high": 0.5, "step": 0.1},
        "layers": {"type": "int", "low": 1, "high": 4},
        "act": {"type": "categorical", "choices": ["relu", "tanh"]},
    }


def test_a_dicts_space_may_hold_tune_domains_or_be_a_function() -> None:
    space = {
        "lr": tune.loguniform(1e-4, 1e-1),
        "model": {"width": tune.choice([8, 16]), "shape": [3, 4]},  # a Tune param_space's
        "seed": tune.grid_search([0, 1]),
        "batch": [16, 32],  # the space section's own forms beside them, read as it reads them
        "hidden": {"type": "int", "low": 8, "high": 64},
    }
    tuned = load_config({**SECTIONS, "train": chatty, "space": space})
    written = {name: spec.model_dump(exclude_defaults=True) for name, spec in tuned.space.items()}
    assert written == {
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
        "model.width": {"type": "categorical", "choices": [8, 16]},
        "model.shape": {"type": "constant", "value": [3, 4]},  # a constant, as Tune reads it
        "seed": {"type": "categorical", "choices": [0, 1]},
        "batch": {"type": "categorical", "choices": [16, 32]},
        "hidden": {"type": "int", "low": 8, "high": 64},
    }

    def define_by_run(trial: Any) -> None:
        trial.suggest_int("layers", 1, 3)

    traced = load_config({**SECTIONS, "train": chatty, "space": define_by_run})
    assert list(traced.space) == ["layers"]
    assert traced.space["layers"].type == "int"


def test_a_pickle_of_a_changed_function_replaces_the_installed_one() -> None:
    install_pickles({"w:f": base64.b64encode(cloudpickle.dumps(lambda p, c: 1)).decode()})
    install_pickles({"w:f": base64.b64encode(cloudpickle.dumps(lambda p, c: 2)).decode()})
    assert resolve_train_function("w:f")({}, None) == 2


def test_a_function_whose_pickle_is_large_is_said_once_with_the_way_to_keep_it_small() -> None:
    data = b"x" * 17 * 2**20  # a dataset the notebook loaded (the limit: 16 MiB)

    def train(params: dict[str, Any], ctx: TrialContext) -> float:
        return float(len(data))

    with pytest.warns(UserWarning, match=r"'train' is 17 MiB pickled, sent with every trial"):
        load_config({**SECTIONS, "train": train})
