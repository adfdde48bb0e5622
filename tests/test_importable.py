"""A project's modules named as one a worker imports first: found before any worker starts."""

from __future__ import annotations

import cmd  # imported by pdb, which `import ray` imports: in every Ray worker
import importlib
import json
import pdb
import sys
from pathlib import Path

import pytest

from hpsearch._importable import shadowing


def test_a_projects_module_named_as_an_imported_one_is_found(tmp_path: Path) -> None:
    assert pdb.Pdb is not None
    (tmp_path / "cmd.py").write_text("raise SystemExit('not the cmd pdb wants')\n")
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "__init__.py").write_text("")
    (tmp_path / "mytrain.py").write_text("")  # a name of its own
    (tmp_path / "sys.py").write_text("")  # built in: found before the path
    (tmp_path / "os.py").write_text("")  # frozen: found before the path
    (tmp_path / "yaml").mkdir()  # no __init__.py: a namespace portion, found last

    found = shadowing(str(tmp_path))

    assert found == [
        ("cmd.py", "cmd", str(cmd.__spec__.origin)),
        ("json", "json", str(json.__spec__.origin)),
    ]


def test_a_module_imported_from_the_project_itself_is_its_own(tmp_path: Path) -> None:
    assert shadowing(str(Path(__file__).resolve().parents[1])) == []  # hpsearch, tests
    assert shadowing(str(tmp_path / "gone")) == []


def test_a_projects_package_also_installed_elsewhere_is_not_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `pip install .` put a copy in site-packages, and the script that runs the search
    # imported it from there: the workers import the project's, the same code.
    installed = tmp_path / "site-packages"
    (installed / "hp_mypkg").mkdir(parents=True)
    (installed / "hp_mypkg" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(installed))
    importlib.import_module("hp_mypkg")
    project = tmp_path / "project"
    (project / "hp_mypkg").mkdir(parents=True)
    (project / "hp_mypkg" / "__init__.py").write_text("")
    try:
        assert shadowing(str(project)) == []
    finally:
        sys.modules.pop("hp_mypkg", None)
