"""A context entered early: its value where it is used, its failure raised there, its exit kept."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from hpsearch._early import entered_early


def test_a_context_entered_early_gives_its_value_and_is_exited_on_the_way_out() -> None:
    seen: list[str] = []

    @contextmanager
    def session() -> Iterator[str]:
        seen.append("entered")
        yield "the session"
        seen.append("exited")

    with entered_early(session()) as early:
        assert seen == ["entered"]  # entered at once, before it is asked for
        assert early.get() == "the session"
    assert seen == ["entered", "exited"]


def test_a_failure_to_enter_is_raised_where_the_value_is_asked_for() -> None:
    @contextmanager
    def unreachable() -> Iterator[str]:
        raise ConnectionError("nothing accepts connections")
        yield "never"  # pragma: no cover

    with entered_early(unreachable()) as early:
        went_on = True  # the block runs (a study with nothing to do needs no session)
        with pytest.raises(ConnectionError, match="nothing accepts"):
            early.get()
    assert went_on


def test_an_error_in_the_block_reaches_the_context_as_a_with_block_would() -> None:
    seen: list[object] = []

    @contextmanager
    def session() -> Iterator[str]:
        try:
            yield "the session"
        except ValueError as error:
            seen.append(error)
            raise

    with pytest.raises(ValueError, match="the search failed"), entered_early(session()):
        raise ValueError("the search failed")
    assert [str(e) for e in seen] == ["the search failed"]


def test_an_interruption_while_entering_goes_on_up_at_once() -> None:
    @contextmanager
    def interrupted() -> Iterator[str]:
        raise KeyboardInterrupt
        yield "never"  # pragma: no cover

    with pytest.raises(KeyboardInterrupt), entered_early(interrupted()):
        pytest.fail("the block must not run")  # pragma: no cover
