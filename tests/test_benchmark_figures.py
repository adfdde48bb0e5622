"""The benchmark figures the docs show are read from the result files when the site is
built (``docs/hooks.py``): none is copied by hand, and one that is not there fails."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.test_config_reference import _hooks

FIGURE = re.compile(r"\{\{ (.+?) \}\}")


def test_every_figure_of_the_docs_is_in_its_result_file() -> None:
    figure = _hooks().figure
    pages = sorted((REPO_ROOT / "docs").rglob("*.md"))  # the site's pages: what MkDocs reads
    found = [m.group(1) for page in pages for m in FIGURE.finditer(page.read_text("utf-8"))]
    assert len(found) > 40  # the side-by-side tables are read from the files
    for expression in found:
        figure(expression)  # raises where a file or a key is not there


@pytest.fixture
def results(tmp_path: Path) -> Path:
    data = {
        "results": {
            "auto": {"wall_s": 17.58, "target_fast": True},
            "ray": {"wall_s": 13.25, "target_fast": False},
        },
        "medians": [{"cpu_ms_per_trial": 34.25}],
        "share": 0.0291,
    }
    (tmp_path / "overhead.json").write_text(json.dumps(data))
    return tmp_path


@pytest.mark.parametrize(
    ("expression", "shown"),
    [
        ("overhead.json results/auto/wall_s", "17.58"),
        ("overhead.json results/auto/wall_s s", "17.6 s"),
        ("overhead.json medians/0/cpu_ms_per_trial .2f", "34.25"),
        ("overhead.json results/auto/wall_s ÷ results/ray/wall_s x", "1.33x"),
        ("overhead.json results/auto/wall_s ÷ results/ray/wall_s <= 1.0", "**missed**"),
        ("overhead.json medians/0/cpu_ms_per_trial <= 40", "met"),
        ("overhead.json share .1%", "2.9%"),
        ("overhead.json results/auto/target_fast verdict", "met"),
        ("overhead.json results/ray/target_fast verdict", "**missed**"),
        ("overhead.json targets", "1 of 2"),
    ],
)
def test_a_figure_is_written_as_the_page_asks(results: Path, expression: str, shown: str) -> None:
    assert _hooks().figure(expression, results) == shown


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("gone.json results/auto/wall_s", "no file benchmarks/results/gone.json"),
        ("overhead.json results/fixed/wall_s", "no 'fixed' on the way to results/fixed/wall_s"),
        ("overhead.json results/auto/wall_s s x", "write FILE PATH [÷ PATH] [FORMAT]"),
    ],
)
def test_a_figure_that_is_not_there_fails_naming_what(
    results: Path, expression: str, names: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(names)):
        _hooks().figure(expression, results)
