"""The analysis figures of a study, drawn by Optuna's own visualisation (plotly).

For each objective: its optimisation history, the importance of each parameter
to it, and the parameters against it in parallel coordinates; with two or
three objectives, their Pareto front as well. Interactive HTML once logged to
MLflow (``MlflowClient.log_figure``). A figure Optuna cannot draw yet (too few
complete trials, a single parameter) is left out, not an error.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from hpsearch.results._study import StudyResults

if TYPE_CHECKING:
    from plotly.graph_objects import Figure

logger = logging.getLogger(__name__)

ANALYSIS_FOLDER = "analysis"
"""Where the figures go among the parent run's artifacts."""


def analysis_figures(results: StudyResults) -> dict[str, Figure]:
    """The study's figures, keyed by the artifact file each goes to (``analysis/....html``)."""
    from optuna import visualization

    study = results.study
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return {}
    names = results.metric_names
    drawers: dict[str, Callable[[], Figure]] = {}
    if 2 <= len(names) <= 3:
        drawers["pareto_front"] = lambda: visualization.plot_pareto_front(study, target_names=names)
    for index, name in enumerate(names):
        value = _objective(index, len(names))
        # Parameter importances are for reaching low values: a maximised objective
        # is turned around, or the importances would be for reaching its worst.
        sign = -1.0 if study.directions[index] is StudyDirection.MAXIMIZE else 1.0
        drawers[f"optimization_history_{name}"] = _bind(
            visualization.plot_optimization_history, study, value, name
        )
        drawers[f"param_importances_{name}"] = _bind(
            visualization.plot_param_importances, study, _scaled(value, sign), name
        )
        drawers[f"parallel_coordinate_{name}"] = _bind(
            visualization.plot_parallel_coordinate, study, value, name
        )
    figures: dict[str, Figure] = {}
    for key, draw in drawers.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Optuna's notes on experimental plots
                figures[f"{ANALYSIS_FOLDER}/{key}.html"] = draw()
        except Exception as exc:  # too few trials or parameters for this one
            logger.info("no %s figure: %s", key, exc)
    return figures


def _objective(index: int, count: int) -> Callable[[FrozenTrial], float]:
    if count == 1:
        return lambda trial: float(trial.value if trial.value is not None else "nan")
    return lambda trial: float(trial.values[index])


def _scaled(value: Callable[[FrozenTrial], float], sign: float) -> Callable[[FrozenTrial], float]:
    return lambda trial: sign * value(trial)


def _bind(
    plot: Callable[..., Figure], study: Any, target: Callable[[FrozenTrial], float], name: str
) -> Callable[[], Figure]:
    return lambda: plot(study, target=target, target_name=name)
