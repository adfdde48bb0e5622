"""The analysis figures of a study, drawn by Optuna's own visualisation (plotly).

For each objective: its optimisation history, the importance of each parameter
to it, and the parameters against it in parallel coordinates; with two or
three objectives, their Pareto front as well. Interactive HTML once logged to
MLflow (``MlflowClient.log_figure``). A figure Optuna cannot draw yet (too few
complete trials, a single parameter) is left out, not an error.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import random
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from hpsearch.results._study import StudyResults

if TYPE_CHECKING:
    from plotly.graph_objects import Figure

logger = logging.getLogger(__name__)

ANALYSIS_FOLDER = "analysis"
"""Where the figures go among the parent run's artifacts."""
FIGURE_LIBRARIES = ("optuna.visualization", "optuna.importance")
"""What the figures are drawn with: Optuna's visualisation (plotly, and matplotlib, which
it imports too) and its importance evaluators (scikit-learn's forests for fANOVA, imported
with the package whatever evaluator draws). Loaded when the figures were drawn, they were
1.1 of the 1.24 s that took after a search of 48 trials on 2 cores: they are loaded in a
process of their own (:mod:`hpsearch.results._figure_process`)."""
MOST_TRIALS_DRAWN = 2000
"""Importances and parallel coordinates of a larger study are drawn from a seeded
sample of this many complete trials: fANOVA's forest over 10,000 trials took
about 140 MB, and 10,000 lines in parallel coordinates read as none."""


def analysis_figures(results: StudyResults) -> Iterator[tuple[str, Figure]]:
    """The study's figures, each with the artifact file it goes to (``analysis/....html``).

    Drawn one at a time, as they are taken: a figure of a large study holds every
    trial's values, and only one need be in memory at once.
    """
    from optuna import visualization

    study = results.study
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return
    names = results.metric_names
    sample = _sample(study, complete)
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
            visualization.plot_param_importances, sample, _scaled(value, sign), name
        )
        drawers[f"parallel_coordinate_{name}"] = _bind(
            visualization.plot_parallel_coordinate, sample, value, name
        )
    for key, draw in drawers.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Optuna's notes on experimental plots
                figure = draw()
        except Exception as exc:  # too few trials or parameters for this one
            logger.info("no %s figure: %s", key, exc)
            continue
        yield f"{ANALYSIS_FOLDER}/{key}.html", figure


def load_libraries(names: list[str]) -> None:
    """Import ``names``; one that fails to import here fails again, and is said, where the
    figures are drawn."""
    for name in names:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def _sample(study: optuna.Study, complete: list[FrozenTrial]) -> optuna.Study:
    """The study itself, or an in-memory copy of a seeded sample of its complete trials."""
    if len(complete) <= MOST_TRIALS_DRAWN:
        return study
    chosen = random.Random(0).sample(complete, MOST_TRIALS_DRAWN)
    sample = optuna.create_study(directions=study.directions)
    sample.add_trials(sorted(chosen, key=lambda t: t.number))
    return sample


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
