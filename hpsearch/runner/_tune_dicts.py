"""The plain dicts Ray Tune carries: a launch in a trial's config, an event in a result.

The one place a launch or an event is a dict: the searcher puts
:func:`tune_config` in each Tune trial's config, the trainable reads it back
with :func:`launch_of`; the trainable reports :func:`tune_result` and the
callback reads it back with :func:`event_of`.
"""

from __future__ import annotations

from typing import Any

from hpsearch.trial.protocol import (
    EVENT_KEY,
    TrialLaunch,
    WorkerEvent,
    dump_event,
    dump_launch,
    load_event,
    load_launch,
)

LAUNCH_KEY = "hpsearch"
"""The key of the launch in a Tune trial's config."""


def tune_config(launch: TrialLaunch) -> dict[str, Any]:
    """A Tune trial's config: the launch, as plain data."""
    return {LAUNCH_KEY: dump_launch(launch)}


def launch_of(config: dict[str, Any]) -> TrialLaunch:
    """The launch in a Tune trial's config."""
    return load_launch(config[LAUNCH_KEY])


def tune_result(event: WorkerEvent) -> dict[str, Any]:
    """A Tune result carrying ``event``."""
    return {EVENT_KEY: dump_event(event)}


def event_of(result: dict[str, Any]) -> WorkerEvent | None:
    """The event in a Tune result; ``None`` for a result hpsearch's worker did not send."""
    data = result.get(EVENT_KEY)
    return load_event(data) if isinstance(data, dict) else None
