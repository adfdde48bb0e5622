"""What a search found, read from its Optuna study: ``hpsearch.load(...)``, the Pareto front.

The tree: ``_study`` (:func:`load`, :class:`StudyResults`, :class:`TrialResult`),
``_outcome`` (:class:`RunOutcome`: what one ``hpsearch run`` did), ``_analysis``
(Optuna's figures of the study), ``_figure_process`` (where they are drawn: a process
of their own) and ``_front_csv`` (the front as CSV), for the parent MLflow run, and
``_export`` (a config that runs one trial again).
"""

from hpsearch.pruning import dominates  # kept here too: it was public here first
from hpsearch.results._analysis import ANALYSIS_FOLDER, FIGURE_LIBRARIES, analysis_figures
from hpsearch.results._export import trial_config, write_trial_config
from hpsearch.results._figure_process import figure_pages, start_figure_process
from hpsearch.results._front_csv import CSV_FILE, write_pareto_csv
from hpsearch.results._outcome import RunOutcome
from hpsearch.results._study import StudyResults, TrialResult, load

__all__ = [
    "ANALYSIS_FOLDER",
    "CSV_FILE",
    "FIGURE_LIBRARIES",
    "RunOutcome",
    "StudyResults",
    "TrialResult",
    "analysis_figures",
    "dominates",
    "figure_pages",
    "load",
    "start_figure_process",
    "trial_config",
    "write_pareto_csv",
    "write_trial_config",
]
