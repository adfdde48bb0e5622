"""A function named under the wrong form of ``train:`` gets one line giving the right one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpsearch.adapters import check_train
from hpsearch.cli import main
from hpsearch.errors import ConfigError

USER_CODE = """
import optuna
from ray import tune
from ray.tune import report as tell_tune


def objective(trial):
    return trial.suggest_float("x", 0.0, 1.0)


def by_name(trial):
    return 0.0


def typed(t: optuna.Trial):
    return 0.0


def suggests(t):
    return t.suggest_float("x", 0.0, 1.0)


def train_func(config):
    return None


def reports(cfg):
    tune.report({"acc": cfg["x"]})


def reports_aliased(cfg):
    tell_tune({"acc": 1.0})


def train(params, ctx):
    ctx.report(0, acc=1.0)
"""

HEAD = "study: {name: forms, n_trials: 2}\nobjective: {metric: acc, direction: maximize}\n"
SPACE = "space: {x: {type: float, low: 0.0, high: 1.0}}\n"


@pytest.fixture
def user_code(project: Path) -> Path:
    (project / "userforms.py").write_text(USER_CODE)
    return project


def _validate(project: Path, text: str) -> tuple[int, str]:
    (project / "c.yaml").write_text(HEAD + text)
    result = CliRunner().invoke(main, ["validate", str(project / "c.yaml")])
    return result.exit_code, result.stderr.strip()


OPTUNA_FIX = ", which suggests its own parameters (space may go)"
TUNE_FIX = ", with its parameters in space (or space: mymod:param_space)"


@pytest.mark.parametrize(
    ("train", "with_space", "line"),
    [
        # An Optuna objective named as a training function: with its space left out, as
        # Optuna's own examples have none, or with one.
        (
            "userforms:objective",
            False,
            "'userforms:objective' is an Optuna objective (it calls trial.suggest_*); "
            f"write train: {{optuna: userforms:objective}}{OPTUNA_FIX}",
        ),
        (
            "userforms:objective",
            True,
            "'userforms:objective' is an Optuna objective (it calls trial.suggest_*); "
            f"write train: {{optuna: userforms:objective}}{OPTUNA_FIX}",
        ),
        (
            "userforms:by_name",
            True,
            "'userforms:by_name' is an Optuna objective (its one parameter is named "
            f"trial); write train: {{optuna: userforms:by_name}}{OPTUNA_FIX}",
        ),
        (
            "userforms:typed",
            True,
            "'userforms:typed' is an Optuna objective (its parameter is annotated "
            f"optuna.Trial); write train: {{optuna: userforms:typed}}{OPTUNA_FIX}",
        ),
        (
            "userforms:suggests",
            True,
            "'userforms:suggests' is an Optuna objective (it calls t.suggest_*); "
            f"write train: {{optuna: userforms:suggests}}{OPTUNA_FIX}",
        ),
        # A Tune trainable named as a training function.
        (
            "userforms:train_func",
            False,
            "'userforms:train_func' is a Ray Tune function trainable (its one parameter is "
            f"named config); write train: {{tune: userforms:train_func}}{TUNE_FIX}",
        ),
        (
            "userforms:train_func",
            True,
            "'userforms:train_func' is a Ray Tune function trainable (its one parameter is "
            f"named config); write train: {{tune: userforms:train_func}}{TUNE_FIX}",
        ),
        (
            "userforms:reports",
            True,
            "'userforms:reports' is a Ray Tune function trainable (it calls tune.report); "
            f"write train: {{tune: userforms:reports}}{TUNE_FIX}",
        ),
        (
            "userforms:reports_aliased",
            True,
            "'userforms:reports_aliased' is a Ray Tune function trainable (it calls "
            f"tell_tune); write train: {{tune: userforms:reports_aliased}}{TUNE_FIX}",
        ),
        # A training function named as an objective or a trainable.
        (
            "{optuna: userforms:train}",
            True,
            "'userforms:train' is a training function train(params, ctx) (it takes "
            "(params, ctx)); write train: userforms:train",
        ),
        (
            "{tune: userforms:train}",
            True,
            "'userforms:train' is a training function train(params, ctx) (it takes "
            "(params, ctx)); write train: userforms:train",
        ),
        # A trainable named as an objective, and the other way round.
        (
            "{optuna: userforms:reports}",
            False,
            "'userforms:reports' is a Ray Tune function trainable (it calls tune.report); "
            f"write train: {{tune: userforms:reports}}{TUNE_FIX}",
        ),
        (
            "{tune: userforms:suggests}",
            True,
            "'userforms:suggests' is an Optuna objective (it calls t.suggest_*); "
            f"write train: {{optuna: userforms:suggests}}{OPTUNA_FIX}",
        ),
    ],
)
def test_a_wrong_form_of_train_is_one_line_that_gives_the_right_one(
    user_code: Path, train: str, with_space: bool, line: str
) -> None:
    code, err = _validate(user_code, f"train: {train}\n" + (SPACE if with_space else ""))
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {user_code / 'c.yaml'}")
    assert err.endswith(line)


@pytest.mark.parametrize("run_module", [True, False])
def test_a_run_imports_the_function_and_says_the_same_as_validate_reads_its_source(
    user_code: Path, run_module: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # validate reads the source (no torch to import); a run imports the module, from
    # its project first on sys.path, as hpsearch run puts it (whatever ran before here).
    monkeypatch.syspath_prepend(str(user_code))
    monkeypatch.delitem(sys.modules, "userforms", raising=False)
    with pytest.raises(ConfigError) as raised:
        check_train("userforms:reports", None, "c.yaml", run_module=run_module)
    assert str(raised.value).endswith(
        "'userforms:reports' is a Ray Tune function trainable (it calls tune.report); "
        f"write train: {{tune: userforms:reports}}{TUNE_FIX}"
    )


def test_the_right_forms_and_a_name_alone_are_accepted(user_code: Path) -> None:
    for train, space in [
        ("userforms:train", SPACE),
        ("{optuna: userforms:objective}", ""),
        ("{tune: userforms:train_func}", SPACE),
        ("{tune: userforms:reports}", SPACE),
        # One parameter named config, under optuna: a name alone is no evidence.
        ("{optuna: userforms:train_func}", ""),
    ]:
        code, err = _validate(user_code, f"train: {train}\n{space}")
        assert code == 0, (train, err)


@pytest.mark.parametrize(
    ("train", "fix"),
    [
        ('"python train.py --lr {lr}"', 'a script runs as train: {command: "python train.py'),
        ("train.py", 'a script runs as train: {command: "python train.py"}'),
        ("userforms.train", "did you mean 'userforms:train'?"),
        ("userforms", "name the training function like mypkg.train:train"),
    ],
)
def test_a_train_string_that_names_no_function_says_what_to_write(
    user_code: Path, train: str, fix: str
) -> None:
    code, err = _validate(user_code, f"train: {train}\n{SPACE}")
    assert code == 2, err
    assert "is not of the form package.module:function; " + fix in err


@pytest.mark.parametrize(
    ("top_level", "call"),
    [
        (
            "study = optuna.create_study()\nstudy.optimize(objective, n_trials=100)\n",
            "line 9: study.optimize(...)",
        ),
        (
            "optuna.create_study().optimize(objective)\n",
            "line 8: optuna.create_study(...).optimize(...)",
        ),
        (
            "tuner = tune.Tuner(objective, param_space={})\nresults = tuner.fit()\n",
            "line 9: tuner.fit()",
        ),
        ("tune.Tuner(objective).fit()\n", "line 8: tune.Tuner(...).fit()"),
        ("tune.run(objective, num_samples=4)\n", "line 8: tune.run(...)"),
        # A script that defines its function and starts its own search, unguarded.
        ("import hpsearch\noutcome = hpsearch.run('s.yaml')\n", "line 9: hpsearch.run(...)"),
        ("from hpsearch import run as go\ngo('s.yaml')\n", "line 9: go(...)"),
    ],
)
def test_a_module_that_runs_a_search_when_imported_is_refused_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, top_level: str, call: str
) -> None:
    name = f"searches_{abs(hash(top_level))}"
    (tmp_path / f"{name}.py").write_text(
        "import optuna\nfrom ray import tune\n\n\ndef objective(trial):\n    return 1.0\n\n"
        + top_level
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as raised:
        check_train("", None, "c.yaml", objective=f"{name}:objective")
    assert f"'{name}' runs a search when imported ({call})" in str(raised.value)
    assert 'put that under if __name__ == "__main__":' in str(raised.value)
    assert name not in sys.modules  # refused from its source: nothing of it ran


def test_a_search_under_main_or_a_models_fit_is_no_search_on_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "guarded_search.py").write_text(
        "import optuna\n\n\ndef objective(trial):\n    return 1.0\n\n\nclass Model:\n"
        "    def fit(self):\n        return self\n\n\nModel().fit()\n"
        'if __name__ == "__main__":\n    optuna.create_study().optimize(objective)\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    check_train("", None, "c.yaml", objective="guarded_search:objective")
