"""What a search found, read from its Optuna study: ``hpsearch.load(...)``, the Pareto front.

The tree: ``_study`` (:func:`load`, :class:`StudyResults`, :class:`TrialResult`),
``_pareto`` (dominance between objective vectors), ``_plot`` (the front as a
PNG scatter and a CSV, for the parent MLflow run).
"""

from hpsearch.results._pareto import dominates
from hpsearch.results._plot import CSV_FILE, PLOT_FILE, write_pareto_files
from hpsearch.results._study import StudyResults, TrialResult, load

__all__ = [
    "CSV_FILE",
    "PLOT_FILE",
    "StudyResults",
    "TrialResult",
    "dominates",
    "load",
    "write_pareto_files",
]
