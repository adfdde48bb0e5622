"""The shape the code keeps: small constructors, a package per extension point, pure config."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "hpsearch"
MOST_CONSTRUCTOR_ARGUMENTS = 7
MOST_FUNCTION_LINES = 80
MOST_CLASS_LINES = 300


def _constructors() -> list[tuple[str, int]]:
    """Every class with an ``__init__`` of its own, and how many arguments it takes."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    arguments = item.args
                    count = (
                        len(arguments.posonlyargs)
                        + len(arguments.args)
                        + len(arguments.kwonlyargs)
                        - 1  # self
                    )
                    found.append((f"{path.relative_to(PACKAGE.parent)}:{node.name}", count))
    return found


def test_no_class_takes_more_than_seven_constructor_arguments() -> None:
    constructors = _constructors()
    assert len(constructors) > 20  # the walk found the classes
    too_many = [(name, n) for name, n in constructors if n > MOST_CONSTRUCTOR_ARGUMENTS]
    assert too_many == []


def test_no_function_is_longer_than_eighty_lines() -> None:
    lengths = {
        f"{path.relative_to(PACKAGE.parent)}:{node.name}": node.end_lineno - node.lineno + 1
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno
    }
    assert "hpsearch/search_parts.py:build_search" in lengths  # the walk found the functions
    assert {name: n for name, n in lengths.items() if n > MOST_FUNCTION_LINES} == {}


def test_no_class_is_longer_than_three_hundred_lines() -> None:
    lengths = {
        f"{path.relative_to(PACKAGE.parent)}:{node.name}": node.end_lineno - node.lineno + 1
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.end_lineno
    }
    assert "hpsearch/lifecycle/_ledger.py:TrialLedger" in lengths  # the walk found the classes
    assert {name: n for name, n in lengths.items() if n > MOST_CLASS_LINES} == {}


@pytest.mark.parametrize("module", ["api.py", "search_parts.py"])
def test_the_root_decodes_no_mode_of_a_part(module: str) -> None:
    # Each part turns its own settings' modes into behaviour (its factory): the root
    # hands the sections over and never reads a mode.
    root = (PACKAGE / module).read_text(encoding="utf-8")
    assert ".mode" not in root
    assert "check_fusion" not in root


@pytest.mark.parametrize("module", ["api.py", "search_parts.py"])
def test_the_root_stays_under_three_hundred_lines(module: str) -> None:
    assert len((PACKAGE / module).read_text(encoding="utf-8").splitlines()) <= 300


@pytest.mark.parametrize("package", ["placement", "oom", "pruning", "runner", "lifecycle"])
def test_each_extension_point_is_a_package_with_a_base_and_a_public_face(package: str) -> None:
    folder = PACKAGE / package
    assert (folder / "_base.py").is_file()
    face = (folder / "__init__.py").read_text(encoding="utf-8")
    assert "__all__" in face
    modules = [p.name for p in folder.glob("*.py") if p.name != "__init__.py"]
    # Private implementations; public only: the settings the config composes.
    public = [name for name in modules if not name.startswith("_")]
    assert public in ([], ["settings.py"]), modules


def _imports(module: str) -> set[str]:
    """The hpsearch modules a module names in its import statements (its own file only)."""
    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    if not path.is_file():
        path = PACKAGE.parent / module.replace(".", "/") / "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hpsearch"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("hpsearch"))
    return found


def test_the_config_is_pure_data_and_imports_no_telemetry_and_no_policy() -> None:
    reached: set[str] = set()
    todo = ["hpsearch.config._schema", "hpsearch.config._load", "hpsearch.config._yaml"]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(_imports(module))
    # The settings of the packages it composes, and nothing of what reads them.
    composed = {
        "hpsearch.placement.settings",
        "hpsearch.oom.settings",
        "hpsearch.simulation.spec",
        "hpsearch.simulation._traces",  # the built-in trace names a spec is checked against
        "hpsearch.trial.script",
        "hpsearch.adapters.forms",  # which form of train: a function is written for
        "hpsearch.adapters.tune_space",  # space: module:name, a Ray Tune param_space
        "hpsearch.adapters.by_value",  # a dict config's own functions, named or pickled
    }
    assert composed <= reached
    readers = ("hpsearch.telemetry", "hpsearch.placement", "hpsearch.oom", "hpsearch.simulation")
    assert [m for m in reached - composed if m.startswith(readers)] == []


@pytest.mark.parametrize(
    "package",
    [
        "hpsearch.oom",
        "hpsearch.placement",
        "hpsearch.simulation",
        "hpsearch.adapters",
        "hpsearch.worker",
        "hpsearch.samplers",
        "hpsearch.pruning",
        "hpsearch.tracking",
    ],
)
def test_a_lazy_package_exports_every_name_it_declares_and_no_other(package: str) -> None:
    import importlib

    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
        assert name in dir(module)
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        _ = module.nothing_here


@pytest.mark.process
def test_the_command_line_and_the_config_load_no_heavy_library() -> None:
    import subprocess
    import sys

    heavy = {"optuna", "numpy", "torch", "ray", "mlflow", "pandas", "plotly"}
    probe = (
        "import sys, hpsearch.cli, hpsearch.config; "
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(heavy)!r})))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"


def test_the_modules_users_imported_before_the_split_still_import_the_same_objects() -> None:
    import importlib

    import hpsearch
    from hpsearch import adapters
    from hpsearch.adapters import tune_space

    members = importlib.import_module("hpsearch.trial.members")
    assert (members.Member, members.fused) == (hpsearch.Member, hpsearch.fused)
    trainable = importlib.import_module("hpsearch.trial.tune_trainable")
    assert trainable.tune_train is adapters.tune_train
    old_space = importlib.import_module("hpsearch.tune_space")
    assert old_space.space_from_tune is tune_space.space_from_tune


def test_the_trial_seam_names_its_public_modules() -> None:
    import importlib

    import hpsearch.trial

    modules = {p.stem for p in (PACKAGE / "trial").glob("*.py") if not p.stem.startswith("_")}
    assert set(hpsearch.trial.__all__) == modules
    for name in hpsearch.trial.__all__:
        assert importlib.import_module(f"hpsearch.trial.{name}").__doc__, name
