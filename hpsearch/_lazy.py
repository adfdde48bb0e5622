"""Lazy package exports: a package's public names are imported from their modules on first use.

A package whose modules pull heavy libraries (Optuna, numpy) declares its
exports as imports under ``if TYPE_CHECKING:`` (what type checkers and readers
see) and hands its module to :func:`lazy_exports`, which reads that block once
and imports each name where it lives when it is first asked for. Importing one
light module of the package (its ``settings``, which the config composes) then
costs only that module: ``hpsearch --help`` and ``hpsearch validate`` do not
load Optuna or numpy through a constant.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any


def lazy_exports(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, from its ``if TYPE_CHECKING:`` imports.

    Use in a package's ``__init__``::

        if TYPE_CHECKING:
            from mypkg._heavy import Thing
        __getattr__, __dir__ = lazy_exports(__name__)
    """
    module = sys.modules[package]
    where = _typing_imports(Path(str(module.__file__)))

    def __getattr__(name: str) -> Any:
        source = where.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(source), name)
        setattr(module, name, value)  # the next lookup is an ordinary attribute
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(module), *where})

    return __getattr__, __dir__


def _typing_imports(init: Path) -> dict[str, str]:
    """Each name the file imports under a top-level ``if TYPE_CHECKING:``, and its module."""
    tree = ast.parse(init.read_text(encoding="utf-8"), str(init))
    names: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and _is_type_checking(node.test)):
            continue
        for statement in node.body:
            if isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
                for alias in statement.names:
                    names[alias.asname or alias.name] = statement.module
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )
