"""The shape the code keeps: small constructors, a package per extension point."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "hpsearch"
MOST_CONSTRUCTOR_ARGUMENTS = 7


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


@pytest.mark.parametrize("package", ["placement", "oom", "pruning", "runner", "lifecycle"])
def test_each_extension_point_is_a_package_with_a_base_and_a_public_face(package: str) -> None:
    folder = PACKAGE / package
    assert (folder / "_base.py").is_file()
    face = (folder / "__init__.py").read_text(encoding="utf-8")
    assert "__all__" in face
    modules = [p.name for p in folder.glob("*.py") if p.name != "__init__.py"]
    assert all(name.startswith("_") for name in modules), modules
