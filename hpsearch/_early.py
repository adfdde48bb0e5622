"""A context entered before it is needed, whose failure to enter is raised where it is used.

The driver starts its runner's session (a local Ray: seconds of its processes
starting) while its tracker opens, but a session that could not start must fail
the search where it always did: inside the search's parent run, which ends
FAILED with the one-line error, and only once the records say there is a search.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Generic, TypeVar, cast

T = TypeVar("T")


class Early(Generic[T]):
    """What entering a context gave: its value, or the error entering it raised."""

    def __init__(self, value: T | None = None, error: Exception | None = None) -> None:
        self._value = value
        self._error = error

    def get(self) -> T:
        """The context's value; raises the error its entering raised, if it did."""
        if self._error is not None:
            raise self._error
        return cast(T, self._value)


@contextmanager
def entered_early(context: AbstractContextManager[T]) -> Iterator[Early[T]]:
    """Enter ``context`` now; yield what it gave (or the error it raised, kept for
    :meth:`Early.get`), and exit it on the way out if it was entered.

    Only an ``Exception`` is kept: an interruption (Ctrl-C) goes on up at once.
    """
    with ExitStack() as stack:
        try:
            early = Early(stack.enter_context(context))
        except Exception as error:
            early = Early(error=error)
        yield early
