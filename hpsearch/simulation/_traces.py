"""The traces shipped with hpsearch: GPU samples replayed by a simulated GPU.

Built from the numbers in the field notes (``scripts/make_seed_traces.py``; see
each file's header), in the CSV format ``hpsearch monitor --csv`` writes.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

BUILTIN_TRACES = {
    "rtx4050-seed004": "rtx4050_seed004.csv",
    "rtx4060-seed000": "rtx4060_seed000.csv",
    "rtx3090-seed001": "rtx3090_seed001.csv",
}
"""Traces shipped with hpsearch, built from the numbers in the field notes (see each header)."""


def trace_path(name_or_path: str) -> Path:
    """The file behind a built-in trace name, or the path itself."""
    if name_or_path in BUILTIN_TRACES:
        traces = resources.files("hpsearch.simulation") / "traces"
        return Path(str(traces / BUILTIN_TRACES[name_or_path]))
    return Path(name_or_path)
