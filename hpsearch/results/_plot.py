"""The accuracy-against-speed picture of a multi-objective study: a scatter with its
Pareto front, and the front as CSV (both go to the parent MLflow run)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from optuna.trial import TrialState

from hpsearch.results._study import StudyResults, TrialResult

PLOT_FILE = "pareto_front.png"
CSV_FILE = "pareto_front.csv"


def write_pareto_files(results: StudyResults, folder: Path) -> list[Path]:
    """Write the scatter (PNG) and the front (CSV) into ``folder``; none before a trial completes.

    The plot puts the second objective on x and the first on y (accuracy against
    samples/s for the usual pair); with more objectives, the front is still computed
    over all of them.
    """
    complete = results.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return []
    front = results.pareto_front()
    return [_plot(results, front, folder / PLOT_FILE), _csv(results, front, folder / CSV_FILE)]


def _plot(results: StudyResults, front_trials: list[TrialResult], path: Path) -> Path:
    # Figure + Agg canvas, not pyplot: no global backend state in the driver.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = results.metric_names
    directions = [d.name.lower() for d in results.study.directions]
    # A target never reached is an infinite value: nothing to draw.
    trials = [
        t
        for t in results.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if all(math.isfinite(v) for v in t.values[:2])
    ]
    on_front = {t.number for t in front_trials}
    figure = Figure(figsize=(7, 5), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    xs = [t.values[1] for t in trials]
    ys = [t.values[0] for t in trials]
    axes.scatter(xs, ys, s=22, color="#9e9e9e", label="complete trials")
    front = sorted((t for t in trials if t.number in on_front), key=lambda t: t.values[1])
    fx = [t.values[1] for t in front]
    fy = [t.values[0] for t in front]
    axes.plot(fx, fy, "o-", color="#d62728", markersize=7, label="Pareto front", zorder=3)
    for trial in front:
        axes.annotate(
            str(trial.number),
            (trial.values[1], trial.values[0]),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=8,
        )
    axes.set_xlabel(f"{names[1]} ({directions[1]})")
    axes.set_ylabel(f"{names[0]} ({directions[0]})")
    axes.set_title(f"{results.name}: {len(front)} of {len(trials)} complete trials on the front")
    axes.grid(alpha=0.3)
    axes.legend(loc="best")
    figure.tight_layout()
    figure.savefig(path)
    return path


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
