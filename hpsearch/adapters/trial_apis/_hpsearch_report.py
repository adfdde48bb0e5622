"""How the trial APIs here report: as a command trial does, one JSON line each.

A line with an integer ``step`` is a report; one without, final metrics. Printed, and
appended to the trial's metrics file (``HPSEARCH_METRICS_FILE``), read there instead
with ``metrics: file-jsonl``. A top-level module of this folder: the script's own Python
imports it, with no hpsearch.
"""

from __future__ import annotations

import json
import os
from typing import Any


def emit(metrics: dict[str, Any]) -> None:
    """Report ``metrics`` (with ``step``: a report; without: final metrics)."""
    line = json.dumps(metrics)
    print(line, flush=True)
    target = os.environ.get("HPSEARCH_METRICS_FILE")
    if target:  # read there instead with metrics: file-jsonl; stdout is read otherwise
        with open(target, "a", encoding="utf-8") as file:
            file.write(line + "\n")
