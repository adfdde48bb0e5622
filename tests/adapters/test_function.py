"""Resolving ``package.module:function``, with errors that name the fix."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from hpsearch._importable import ensure_importable_from
from hpsearch.adapters import resolve_train_function
from hpsearch.errors import ConfigError
from tests import train_functions
from tests.harness import unactivated_environment


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


def test_a_package_of_a_src_layout_not_installed_is_told_to_be_installed(project: Path) -> None:
    package = project / "src" / "srcpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text("from srcpkg.model import score\n")
    (package / "model.py").write_text("def score(x):\n    return x\n")
    ensure_importable_from(str(project))
    fix = (
        "install the project (src/srcpkg is a src layout's package): pip install -e . here, "
        "or run with PYTHONPATH=src"
    )
    with pytest.raises(ConfigError) as info:
        resolve_train_function("srcpkg.train:train", source="c.yaml")
    assert str(info.value) == (
        "c.yaml: train: cannot import module 'srcpkg.train' (no module named 'srcpkg'); " + fix
    )
    # Named through src/ it imports, but its own absolute imports do not.
    with pytest.raises(ConfigError) as info:
        resolve_train_function("src.srcpkg.train:train", source="c.yaml")
    assert str(info.value).endswith(f"name it 'srcpkg.train:train' and {fix}")


def test_a_function_of_the_started_program_is_refused_with_its_modules_name(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A script that defines train and calls hpsearch.run with `train: __main__:train`: the
    # driver has it, each trial's worker (Ray's __main__) does not, and every trial failed.
    script = types.ModuleType("__main__")
    script.__file__ = str(project / "search.py")
    monkeypatch.setitem(sys.modules, "__main__", script)
    with pytest.raises(ConfigError) as info:
        resolve_train_function("__main__:train", source="c.yaml")
    assert str(info.value) == (
        f"c.yaml: train: '__main__:train' names the program that was started "
        f"({project / 'search.py'}), which each trial's worker does not run (its __main__ "
        "is Ray's); name the script's module: 'search:train'"
    )
    del script.__file__  # a notebook's
    with pytest.raises(ConfigError, match="name the module that defines 'train'"):
        resolve_train_function("__main__:train", source="c.yaml")


def test_a_message_of_several_lines_is_one_line_of_the_error(project: Path) -> None:
    # As optuna.integration's modules say a missing optuna-integration: a line break first.
    (project / "integrated.py").write_text(
        "raise ModuleNotFoundError('\\nCould not find `optuna-integration` for `mlflow`.\\n'\n"
        "                          'Please run `pip install optuna-integration[mlflow]`.')\n"
    )
    ensure_importable_from(str(project))
    with pytest.raises(ConfigError) as info:
        resolve_train_function("integrated:objective")
    assert str(info.value) == (
        "<config>: train: importing 'integrated' failed: ModuleNotFoundError: Could not find "
        "`optuna-integration` for `mlflow`. Please run `pip install optuna-integration[mlflow]`.; "
        "install the missing dependency"
    )


_FLAGS_AT_THE_TOP = """
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--data"{required})
args = parser.parse_args()

def objective(trial):
    return float(args.epochs)
"""


def test_a_module_that_parses_its_flags_at_its_top_level_gets_its_defaults(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Imported by a Ray worker, argparse would read the worker's own flags.
    worker_argv = ["default_worker.py", "--node-ip-address=127.0.0.1", "--object-store-name=x"]
    monkeypatch.setattr("sys.argv", worker_argv)
    (project / "flags_at_the_top.py").write_text(_FLAGS_AT_THE_TOP.format(required=""))
    ensure_importable_from(str(project))
    objective = resolve_train_function("flags_at_the_top:objective", objective=True)
    assert objective(None) == 3.0
    import sys

    assert sys.argv == worker_argv  # put back


def test_a_module_that_exits_while_imported_is_one_line_naming_train_and_the_fix(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "flags_required.py").write_text(_FLAGS_AT_THE_TOP.format(required=", required=True"))
    ensure_importable_from(str(project))
    with pytest.raises(ConfigError) as info:
        resolve_train_function("flags_required:objective", source="c.yaml", key="train.optuna")
    assert str(info.value) == (
        "c.yaml: train.optuna: importing 'flags_required' exited: flags_required: error: "
        "the following arguments are required: --data; its top-level code parses a command "
        'line or exits: move it under if __name__ == "__main__":, or run the script with its '
        "flags as train: {command: ...}"
    )
    assert capsys.readouterr().err == ""  # argparse's usage lines: only in the error


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


def test_a_command_whose_program_or_python_script_is_missing_is_refused_first(
    project: Path,
) -> None:
    from hpsearch.adapters import check_train
    from hpsearch.trial.script import CommandSpec

    def check(command: str) -> None:
        check_train("", CommandSpec(command=command), "c.yaml")

    (project / "train.py").write_text("print('loss=1')\n")
    for present in (
        "python train.py --lr {lr}",
        "python3 -u -W ignore train.py",
        f"{sys.executable} -X dev train.py",
        "python -m http.server",  # a module: found by Python, not here
        "python {script} --lr {lr}",  # the script is a parameter: known per trial
        "bash -c 'echo loss=1'",
    ):
        check(present)
    for command, words in (
        ("pythn train.py", "program 'pythn' is not on PATH; install it, or give its path"),
        (
            "python -u trian.py --lr {lr}",
            f"Python's script 'trian.py' is not there (from {project}); give its path from",
        ),
        ("python3.11 src/train.py", "Python's script 'src/train.py' is not there"),
    ):
        with pytest.raises(ConfigError, match=re.escape(words)):
            check(command)


def test_a_python_script_given_none_of_the_searched_parameters_is_refused_first(
    project: Path,
) -> None:
    from hpsearch.adapters import check_train
    from hpsearch.trial.script import CommandSpec

    def check(command: str, space: tuple[str, ...] = ("lr", "width")) -> None:
        check_train("", CommandSpec(command=command), "c.yaml", space=space)

    argparse_script = "import argparse\np = argparse.ArgumentParser()\n"
    (project / "train.py").write_text(argparse_script)
    reads_env = "import json, os\nparams = json.loads(os.environ['HPSEARCH_PARAMS'])\n"
    (project / "from_env.py").write_text(reads_env)
    (project / "main.py").write_text("import argparse\nfrom lib.setup import params\n")
    (project / "scripts").mkdir()  # a script of its own folder, its package in src/
    (project / "scripts" / "run.py").write_text("import argparse\nimport proj.env\n")
    (project / "src" / "proj").mkdir(parents=True)
    (project / "src" / "proj" / "env.py").write_text(reads_env)
    (project / "lib").mkdir()
    (project / "lib" / "__init__.py").write_text("")
    (project / "lib" / "setup.py").write_text("from .env import params\n")
    (project / "lib" / "env.py").write_text(reads_env)
    (project / "nni_trial.py").write_text("import nni\nparams = nni.get_next_parameter()\n")
    wandb_script = "import wandb\nwith wandb.init() as run:\n    lr = run.config.lr\n"
    (project / "wandb_trial.py").write_text(wandb_script)
    for given in (
        "python train.py {args}",
        "python train.py --lr {lr}",
        "python train.py {args_no_hyphens}",
        "python train.py --params $HPSEARCH_PARAMS",
        "python from_env.py",  # it reads them from its environment
        "python main.py",  # through a module of its folder, which a helper of its reads
        "python scripts/run.py",  # through the project's package, under src/
        "python nni_trial.py",  # NNI's trial API, which hpsearch answers
        "python wandb_trial.py",  # W&B's run config, which hpsearch answers too
        "bash -c 'python train.py'",  # not a python script: its program is not read
    ):
        check(given)
    check("python train.py", space=())  # constants alone: every trial runs alike anyway
    with pytest.raises(ConfigError) as info:
        check("python train.py --epochs 3 --fmt={{x}}")  # a literal brace names nothing
    assert str(info.value) == (
        "c.yaml: train.command: python train.py --epochs 3 '--fmt={{x}}' names none of the "
        "space's parameters ({args}, {lr}), and train.py reads no environment variable "
        "(HPSEARCH_PARAMS): every trial would run alike, on the script's defaults; add {args} "
        "(one --name=value per parameter): command: python train.py --epochs 3 '--fmt={{x}}' {args}"
        " (a script that reads them through an installed package: name HPSEARCH_PARAMS in a "
        "comment of the script)"
    )


def test_a_program_installed_beside_hpsearch_is_found_though_its_environment_is_not_active(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torchrun or accelerate, installed with hpsearch; hpsearch run as .venv/bin/hpsearch.
    from hpsearch.adapters import check_train
    from hpsearch.trial.script import CommandSpec

    unactivated_environment(tmp_path / "env", monkeypatch)
    check_train("", CommandSpec(command="sometool --lr {lr}"), "c.yaml")

    for name in ("prefix", "base_prefix"):  # no environment: PATH alone
        monkeypatch.setattr(sys, name, str(tmp_path))
    with pytest.raises(ConfigError, match="program 'sometool' is not on PATH"):
        check_train("", CommandSpec(command="sometool --lr {lr}"), "c.yaml")
