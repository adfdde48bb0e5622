"""A listener: each trial's end as one JSON line, for a dashboard of your own.

A listener is told every event of every trial (its opening, reports, end...), in the
driver, in order; override the events you need. Pass it to ``hpsearch.run``.
"""

from __future__ import annotations

import json
from pathlib import Path

from hpsearch.lifecycle import TrialEnded, TrialListener


class EndedLines(TrialListener):
    """Appends ``{"trial", "outcome", "values", "seconds"}`` to ``path`` as each trial ends."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_ended(self, event: TrialEnded) -> None:
        line = {
            "trial": event.number,
            "outcome": event.outcome.value,
            "values": event.values,
            "seconds": round(event.duration_s, 3),
        }
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
