"""Each setting is declared once: its default lives in the config section that declares it."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from hpsearch.config import RunConfig

PACKAGE = Path(__file__).resolve().parents[2] / "hpsearch"


def _sections(model: type[BaseModel], found: set[type[BaseModel]]) -> set[type[BaseModel]]:
    """``model`` and every section it composes, however deep."""
    if model not in found:
        found.add(model)
        for field in model.model_fields.values():
            for kind in (*getattr(field.annotation, "__args__", ()), field.annotation):
                if isinstance(kind, type) and issubclass(kind, BaseModel):
                    _sections(kind, found)
    return found


def _default(node: ast.expr) -> Any:
    """The literal default of a class field (``Field(default=...)`` too); ``None`` if none."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Field":
        given = [k.value for k in node.keywords if k.arg == "default"]
        return _default(given[0]) if given else None
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _class_defaults() -> dict[str, list[tuple[str, Any]]]:
    """Every class field with a default in hpsearch: name to (where, default)."""
    found: dict[str, list[tuple[str, Any]]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if (
                    isinstance(item, ast.AnnAssign)
                    and isinstance(item.target, ast.Name)
                    and item.value is not None
                ):
                    where = f"{path.relative_to(PACKAGE.parent)}:{node.name}"
                    found[item.target.id].append((where, _default(item.value)))
    return found


def test_no_default_of_a_config_section_is_declared_a_second_time() -> None:
    sections = _sections(RunConfig, set())
    assert len(sections) > 10  # the walk reached the composed sections
    elsewhere = _class_defaults()
    repeated = []
    for section in sections:
        for name, field in section.model_fields.items():
            if field.default is PydanticUndefined or field.default is None:
                continue
            for where, default in elsewhere[name]:
                if not where.endswith(f":{section.__name__}") and default == field.default:
                    repeated.append(
                        f"{section.__name__}.{name} = {field.default!r} again in {where}"
                    )
    assert repeated == []
