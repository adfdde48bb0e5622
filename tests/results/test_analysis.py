"""What the analysis figures are drawn with loads on a thread of its own, while trials run."""

from __future__ import annotations

import sys

import pytest

from hpsearch import results
from hpsearch.results import _analysis


def test_the_figure_libraries_load_on_a_thread_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_analysis, "FIGURE_LIBRARIES", ("colorsys", "no_such_figure_library"))
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    thread = results.load_figure_libraries()
    assert thread is not None
    assert thread.daemon  # a search that ends first is not held up by it
    thread.join(30)
    assert not thread.is_alive()
    assert "colorsys" in sys.modules
    # One that cannot load is no error here: drawing the figures says it.
    assert "no_such_figure_library" not in sys.modules


def test_nothing_starts_where_they_are_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_analysis, "FIGURE_LIBRARIES", ("sys", "os"))
    assert results.load_figure_libraries() is None
