"""A Ray Tune param_space read as hpsearch's space: each domain an Optuna distribution."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from pydantic import TypeAdapter
from ray import tune

from hpsearch.adapters import TuneSpaceError, TuneSpaceWarning, converted
from hpsearch.config import load_config
from hpsearch.errors import ConfigError
from hpsearch.space import ParamSpec, SearchSpace, expand_space

SPACE = {
    "lr": tune.loguniform(1e-4, 1e-1),
    "momentum": tune.uniform(0, 1),
    "dropout": tune.quniform(0.0, 0.5, 0.1),
    "layers": tune.randint(1, 5),
    "width": tune.lograndint(16, 512),
    "batch": tune.qrandint(32, 256, 32),
    "act": tune.choice(["relu", "tanh"]),
    "seed": tune.grid_search([0, 1, 2]),
    "epochs": 10,
    "shape": [64, 64],
    "model": {"norm": tune.choice([True, False]), "depth": 2},
}


def test_each_tune_domain_becomes_the_optuna_distribution_it_samples_from() -> None:
    entries = TypeAdapter(dict[str, ParamSpec]).validate_python(expand_space(converted(SPACE)))
    space = SearchSpace(entries)
    assert space.distributions() == {
        "lr": FloatDistribution(1e-4, 1e-1, log=True),
        "momentum": FloatDistribution(0.0, 1.0),
        "dropout": FloatDistribution(0.0, 0.5, step=0.1),
        "layers": IntDistribution(1, 4),  # randint excludes its upper bound
        "width": IntDistribution(16, 511, log=True),
        "batch": IntDistribution(32, 256, step=32),  # qrandint includes it
        "act": CategoricalDistribution(("relu", "tanh")),
        "seed": CategoricalDistribution((0, 1, 2)),
        "model.norm": CategoricalDistribution((True, False)),
    }
    assert space.constants() == {"epochs": 10, "shape": [64, 64], "model.depth": 2}


@pytest.mark.parametrize(
    ("domain", "words"),
    [
        (tune.sample_from(lambda spec: 1), "tune.sample_from, which has no Optuna distribution"),
        (tune.randn(0, 1), "tune.randn"),
    ],
)
def test_a_domain_with_no_distribution_is_named(domain: object, words: str) -> None:
    with pytest.raises(TuneSpaceError, match=words):
        converted({"x": domain})


@pytest.mark.parametrize(
    ("space", "words"),
    [
        ({"sizes": tune.choice([[16, 32], [32, 64]])}, "'sizes'] is tune.choice of a list"),
        ({"m": {"cfg": tune.choice([{"layers": 2}])}}, "'m.cfg'] is tune.choice of a dict"),
        ({"act": {"grid_search": ["relu", (1, 2)]}}, "'act'] is tune.grid_search of a tuple"),
    ],
)
def test_a_choice_of_values_optuna_does_not_store_is_named_with_the_fix(
    space: dict[str, object], words: str
) -> None:
    with pytest.raises(TuneSpaceError, match="look the value up in the trainable") as info:
        converted(space)
    assert words in str(info.value)
    assert converted({"ok": tune.choice([None, True, 1, 0.5, "x"])}) == {
        "ok": [None, True, 1, 0.5, "x"]
    }


def test_a_quantized_log_domain_is_searched_without_its_step_and_says_so() -> None:
    # Optuna takes no step on a log scale; Ray Tune's own OptunaSearch drops it too.
    space = {"lr": tune.qloguniform(1e-4, 1e-1, 5e-5), "width": tune.qlograndint(8, 512, 8)}
    with pytest.warns(TuneSpaceWarning) as said:
        entries = converted(space)
    assert entries == {
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
        "width": {"type": "int", "low": 8, "high": 512, "log": True},  # q: its bound included
    }
    assert [str(w.message) for w in said] == [
        "param_space['lr'] is tune.qloguniform: Optuna cannot step a log scale, so it is "
        "searched as tune.loguniform, without the step 5e-05 (as Ray Tune's OptunaSearch "
        "does); write tune.loguniform to say so",
        "param_space['width'] is tune.qlograndint: Optuna cannot step a log scale, so it is "
        "searched as tune.lograndint, without the step 8 (as Ray Tune's OptunaSearch does); "
        "write tune.lograndint to say so",
    ]


def test_a_configs_param_space_warning_points_at_its_space_line(project: Path) -> None:
    (project / "qspace.py").write_text(
        "from ray import tune\nparam_space = {'lr': tune.qloguniform(1e-3, 1e-1, 1e-3)}\n"
    )
    (project / "q.yaml").write_text(
        "study: {name: s, n_trials: 2}\n"
        "objective: {metric: acc, direction: maximize}\n"
        "train: {tune: qspace:param_space}\n"
        "space: qspace:param_space\n"
    )
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        config = load_config(project / "q.yaml")
    assert config.search_space.distributions() == {"lr": FloatDistribution(1e-3, 1e-1, log=True)}
    [warning] = [w for w in said if issubclass(w.category, TuneSpaceWarning)]
    assert (Path(warning.filename).name, warning.lineno) == ("q.yaml", 4)
    assert str(warning.message).startswith("space: param_space['lr'] is tune.qloguniform")


def test_a_config_names_the_param_space_in_the_users_code(project: Path) -> None:
    (project / "tunespace.py").write_text(
        "from ray import tune\n"
        "param_space = {'lr': tune.loguniform(1e-3, 1e-1), 'f': tune.sample_from(lambda s: 1)}\n"
        "good = {'lr': tune.loguniform(1e-3, 1e-1)}\n"
    )
    base = (
        "study: {name: s, n_trials: 2}\n"
        "objective: {metric: acc, direction: maximize}\n"
        "train: {tune: tunespace:good}\n"
    )
    (project / "good.yaml").write_text(base + "space: tunespace:good\n")
    assert set(load_config(project / "good.yaml").search_space.distributions()) == {"lr"}
    (project / "bad.yaml").write_text(base + "space: tunespace:param_space\n")
    with pytest.raises(ConfigError, match=r"param_space\['f'\] is tune.sample_from"):
        load_config(project / "bad.yaml")


def test_a_param_space_built_by_a_function_of_no_arguments_is_read(project: Path) -> None:
    # Ray's own examples build param_space under `if __name__ == "__main__":`; the user's
    # two-line module returns it from a function instead (the guide shows it).
    (project / "tunespacefns.py").write_text(
        "from ray import tune\n"
        "def param_space():\n"
        "    return {'lr': tune.loguniform(1e-3, 1e-1), 'width': tune.choice([8, 16])}\n"
        "def needs(seed, data):\n"
        "    return {}\n"
        "def fails():\n"
        "    raise RuntimeError('no data')\n"
    )
    base = (
        "study: {name: s, n_trials: 2}\n"
        "objective: {metric: acc, direction: maximize}\n"
        "train: {tune: tunespacefns:param_space}\n"
    )
    (project / "good.yaml").write_text(base + "space: tunespacefns:param_space\n")
    space = load_config(project / "good.yaml").search_space.distributions()
    assert space == {
        "lr": FloatDistribution(1e-3, 1e-1, log=True),
        "width": CategoricalDistribution((8, 16)),
    }
    for name, words in [
        ("needs", "is a function that needs arguments; a param_space function takes none"),
        ("fails", r"'tunespacefns:fails\(\)' raised RuntimeError: no data"),
    ]:
        (project / "bad.yaml").write_text(base + f"space: tunespacefns:{name}\n")
        with pytest.raises(ConfigError, match=words):
            load_config(project / "bad.yaml")
