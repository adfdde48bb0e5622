"""Resolving ``package.module:function``, with errors that name the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch._importable import ensure_importable_from
from hpsearch.adapters import resolve_train_function
from hpsearch.errors import ConfigError
from tests import train_functions


def test_resolves_a_function() -> None:
    assert resolve_train_function("tests.train_functions:quick") is train_functions.quick


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("no_such_pkg.mod:train", "cannot import module 'no_such_pkg.mod'"),
        ("tests.train_functions:quik", "did you mean 'tests.train_functions:quick'"),
        ("tests.train_functions:BASE", "has no 'BASE'"),
        ("tests.conftest:REPO_ROOT", "not a function"),
        ("tests.train_functions:TrialContext", "cannot be called as train(params, ctx)"),
        ("nocolon", "package.module:function"),
    ],
)
def test_errors_name_train_and_the_fix(spec: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_train_function(spec, source="c.yaml")
    assert info.value.key == "train"
    assert words in str(info.value)
    assert str(info.value).startswith("c.yaml: train: ")


def test_import_errors_inside_the_module_are_reported(project: Path) -> None:
    (project / "brokenmod.py").write_text("import not_installed_dependency\n")
    (project / "raising.py").write_text("raise RuntimeError('bad module')\n")
    ensure_importable_from(str(project))
    with pytest.raises(ConfigError, match="importing 'brokenmod' failed: ModuleNotFoundError"):
        resolve_train_function("brokenmod:train")
    with pytest.raises(ConfigError, match="importing 'raising' raised RuntimeError: bad module"):
        resolve_train_function("raising:train")


def test_user_project_on_sys_path(project: Path) -> None:
    (project / "userpkg.py").write_text("def train(params, ctx):\n    return 1.0\n")
    ensure_importable_from(str(project))
    assert resolve_train_function("userpkg:train")({}, None) == 1.0


def test_validate_reads_a_train_module_without_running_it(project: Path) -> None:
    import sys

    from hpsearch.adapters import check_train

    # Running this module would fail: validate reads it, and says what the source shows.
    (project / "unrun.py").write_text(
        "import json\nraise RuntimeError('ran')\n\ndef train(params, ctx):\n    return 1.0\n"
    )
    (project / "twoless.py").write_text("def train(params):\n    return 1.0\n")
    (project / "missing.py").write_text("import not_installed_dependency\n\ndef train(p, c): ...\n")
    ensure_importable_from(str(project))

    check_train("unrun:train", None, "c.yaml", run_module=False)
    assert "unrun" not in sys.modules
    with pytest.raises(ConfigError, match=r"cannot be called as train\(params, ctx\)"):
        check_train("twoless:train", None, "c.yaml", run_module=False)
    with pytest.raises(ConfigError, match="No module named 'not_installed_dependency'"):
        check_train("missing:train", None, "c.yaml", run_module=False)
    # What the source cannot tell, the import does (a typo, with its suggestion).
    with pytest.raises(ConfigError, match="did you mean 'twoless:train'"):
        check_train("twoless:trian", None, "c.yaml", run_module=False)
    # hpsearch run imports the module: its error is the config's.
    with pytest.raises(ConfigError, match="importing 'unrun' raised RuntimeError: ran"):
        check_train("unrun:train", None, "c.yaml")


def test_a_class_trainable_is_taken_as_tune_and_refused_as_a_function(project: Path) -> None:
    # Called as a training function, a tune.Trainable would only be constructed: every
    # trial would fail "without reporting"; the config is refused with the line to write.
    (project / "classic.py").write_text(
        "from ray import tune\n"
        "class Quadratic(tune.Trainable):\n"
        "    def setup(self, config):\n"
        "        self.x = config['x']\n"
        "    def step(self):\n"
        "        return {'score': -self.x ** 2, 'done': True}\n"
    )
    ensure_importable_from(str(project))
    import classic  # type: ignore[import-not-found]

    taken = resolve_train_function("classic:Quadratic", key="train.tune", trainable=True)
    assert taken is classic.Quadratic  # the adapter runs it as Tune does (test_tune.py)
    with pytest.raises(ConfigError) as info:
        resolve_train_function("classic:Quadratic", source="c.yaml")
    assert str(info.value) == (
        "c.yaml: train: 'classic:Quadratic' is a class trainable (tune.Trainable), which "
        "train calls as a function; write train: {tune: classic:Quadratic}"
    )
