"""The config reference reads like a library's API page: every key described, types in words,
defaults shown, one entry per section, and no markup from the docstrings it is built from."""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType

from tests.conftest import REPO_ROOT


def _hooks() -> ModuleType:
    """``docs/hooks.py``, which MkDocs runs to generate the page (not a package module)."""
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO_ROOT / "docs" / "hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_key_of_the_config_is_described() -> None:
    hooks = _hooks()
    assert hooks.undocumented_keys() == []
    page = hooks.config_reference()
    entries = re.findall(r"^- \*\*`(\w+)`\*\*: (.+)$", page, re.MULTILINE)
    assert len(entries) > 100  # the walk reached every section
    for name, text in entries:
        kind, _, rest = text.partition("; ")
        default, _, meaning = rest.partition(". ")
        assert kind, name
        assert default == "required" or default.startswith("default "), (name, default)
        assert meaning.strip(), name


def test_the_reference_has_no_markup_debris_and_one_entry_per_section() -> None:
    page = _hooks().config_reference()
    assert re.findall(r":(?:mod|func|class|meth|data|attr):`", page) == []
    assert "``" not in page
    assert "\\|" not in page
    # Types in words, not Python's reprs.
    assert re.findall(r"Annotated|Literal\[|typing\.|<class|NoneType|\| None", page) == []
    sections = re.findall(r"^## (.+)$", page, re.MULTILINE)
    assert len(sections) == len(set(sections))
    for section in ("`study`", "`train`", "`space.<name>`", "`packing`", "`fusion`"):
        assert section in sections
    durations = re.findall(r"^- \*\*`timeout`\*\*: ([^;]+);", page, re.MULTILINE)
    assert durations == ["seconds, e.g. `90`, `90s`, `2m` or `1h`, or none"]
