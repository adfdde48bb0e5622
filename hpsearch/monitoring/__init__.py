"""Watching GPUs for a person: ``hpsearch monitor``, its report, its verdicts and advice.

The tree: ``_verdicts`` (how well a GPU was used, and what to change, with the
arithmetic shown: the packing policy's own), ``_report`` (the report per GPU,
also kept on a search's parent run), ``_watch`` (``hpsearch monitor``: sample
for a while on one clock, show it live, write the samples as CSV, report).
"""

from hpsearch.monitoring._report import render_report
from hpsearch.monitoring._verdicts import (
    PackingEstimate,
    Verdict,
    packing_estimate,
    recommendations,
    verdict_of,
)
from hpsearch.monitoring._watch import WallClock, WatchClock, WatchResult, watch

__all__ = [
    "PackingEstimate",
    "Verdict",
    "WallClock",
    "WatchClock",
    "WatchResult",
    "packing_estimate",
    "recommendations",
    "render_report",
    "verdict_of",
    "watch",
]
