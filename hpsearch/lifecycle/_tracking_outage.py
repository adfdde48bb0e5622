"""A search whose tracking server stays out of reach too long stops, with one line saying so.

The tracker keeps a server's writes while it is out of reach
(:class:`~hpsearch.tracking.OutageTracker`); this listener ends the wait at
``tracking.outage_limit``: the search stops as on Ctrl-C (what ran is recorded in
Optuna, open trials are queued again) and the command exits 2 naming ``tracking.uri``.
"""

from __future__ import annotations

from collections.abc import Callable

from hpsearch.interrupts import stop_for
from hpsearch.lifecycle._base import TrialListener


def outage_line(source: str, uri: str, down_s: float, limit_s: float) -> str:
    """The error line of a search stopped because its tracking server stayed away."""
    return (
        f"{source}: tracking.uri: the tracking server {uri} has not answered for "
        f"{down_s:.0f} s (tracking.outage_limit: {limit_s:g} s); the search stopped as on "
        "Ctrl-C and its open trials run again on the next hpsearch run; start the server "
        "(or raise tracking.outage_limit) and run again"
    )


class OutageLimit(TrialListener):
    """Stops the search once the tracking server has been out of reach past the limit.

    Args:
        down_for: seconds the server has been out of reach (``None``: it answers).
        limit_s: ``tracking.outage_limit``.
        uri, source: the server and the config file, for the line.
        stop: stops the search with that line (interrupts the running search).
    """

    def __init__(
        self,
        down_for: Callable[[], float | None],
        limit_s: float,
        uri: str,
        source: str,
        stop: Callable[[str], None] = stop_for,
    ) -> None:
        self._down_for = down_for
        self._limit_s = limit_s
        self._uri = uri
        self._source = source
        self._stop = stop
        self.stopped = False

    def on_tick(self, now: float) -> None:
        down = self._down_for()
        if self.stopped or down is None or down <= self._limit_s:
            return
        self.stopped = True
        self._stop(outage_line(self._source, self._uri, down, self._limit_s))
