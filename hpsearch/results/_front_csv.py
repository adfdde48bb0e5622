"""The Pareto front of a multi-objective study as CSV, for the parent MLflow run.

The figures (the front among all trials, and more) are Optuna's own, drawn in
``hpsearch.results._analysis``.
"""

from __future__ import annotations

import csv
from pathlib import Path

from optuna.trial import TrialState

from hpsearch.results._study import StudyResults, TrialResult

CSV_FILE = "pareto_front.csv"


def write_pareto_csv(results: StudyResults, folder: Path) -> Path | None:
    """Write the front, a row per trial, into ``folder``; ``None`` before a trial completes."""
    complete = results.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return None
    return _csv(results, results.pareto_front(), folder / CSV_FILE)


def _csv(results: StudyResults, front: list[TrialResult], path: Path) -> Path:
    params = sorted({name for trial in front for name in trial.params})
    names = results.metric_names
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["trial_number", *names, *params, "mlflow_run_id"])
        for trial in front:
            writer.writerow(
                [
                    trial.number,
                    *(trial.values or []),
                    *(trial.params.get(p, "") for p in params),
                    trial.mlflow_run_id or "",
                ]
            )
    return path
