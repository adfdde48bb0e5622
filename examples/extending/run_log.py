"""A tracker: where the search's runs are recorded, in place of MLflow.

A tracker implements :class:`hpsearch.tracking.Tracker` (start and end runs, log
params, metrics, tags, artifacts). This one keeps the runs in memory, as
:class:`hpsearch.tracking.MemoryTracker` does, and also writes a line per run as it
ends to a log file: a start for a tracker of your own (a database, a message queue).
"""

from __future__ import annotations

from pathlib import Path

from hpsearch.tracking import MemoryTracker, RunStatus


class RunLog(MemoryTracker):
    """Runs kept in memory; each run's end, its status and metrics, a line in ``path``."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def end_run(self, run_id: str, status: RunStatus) -> None:
        super().end_run(run_id, status)
        run = self.runs[run_id]
        # The latest value of each of the trial's own metrics (logged in order).
        latest = {name: v for name, v, _ in run.metrics if not name.startswith("system/")}
        metrics = " ".join(f"{k}={v:.4g}" for k, v in sorted(latest.items()))
        with self.path.open("a", encoding="utf-8") as out:
            out.write(f"{run.name} {status.value} {metrics}\n")
