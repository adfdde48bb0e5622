"""A tracking server out of reach past ``tracking.outage_limit`` stops the search, once."""

from __future__ import annotations

from hpsearch.lifecycle import OutageLimit


def test_the_search_stops_once_the_server_has_been_away_past_the_limit() -> None:
    down: list[float | None] = [None]
    stops: list[str] = []
    limit = OutageLimit(lambda: down[0], 60.0, "http://127.0.0.1:5000", "c.yaml", stops.append)

    limit.on_tick(0.0)  # the server answers
    down[0] = 59.0
    limit.on_tick(1.0)  # away, within the limit: the search goes on
    assert stops == []
    down[0] = 61.0
    limit.on_tick(2.0)
    down[0] = 75.0
    limit.on_tick(3.0)  # stopped once, not at every tick after
    assert len(stops) == 1
    assert stops[0].startswith(
        "c.yaml: tracking.uri: the tracking server http://127.0.0.1:5000 has not answered "
        "for 61 s (tracking.outage_limit: 60 s)"
    )
    assert "\n" not in stops[0]
