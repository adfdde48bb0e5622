"""What one ``hpsearch run`` did: its counts, how it ended, and the study's results."""

from __future__ import annotations

from dataclasses import dataclass

from hpsearch.results._study import StudyResults


@dataclass(frozen=True)
class RunOutcome:
    """What one ``hpsearch run`` did.

    Attributes:
        results: the study's results (all runs so far, this one included).
        mlflow_parent_run_id: this run's MLflow parent run; ``None`` when there was nothing to do.
        finished: trials this run finished (complete, pruned or failed).
        interrupted: trials stopped by an interruption (enqueued to run again).
        elapsed_s: how long the search ran on the runner's clock (simulated seconds
            under the simulated runner).
        timed_out: ``study.timeout`` ended the search.
        overdue: trials still running at ``study.timeout`` plus its grace were stopped
            (they are among ``interrupted``).
        mlflow_experiment_id: the MLflow experiment the runs are in.
        short_of: finished trials the study still lacks of ``study.n_trials`` (0: reached).
        stopped: why a trial's request ended the search before its budget
            (``ctx.stop_search``, an objective's ``study.stop()``); empty: none did.
    """

    results: StudyResults
    mlflow_parent_run_id: str | None
    finished: int
    interrupted: int
    elapsed_s: float = 0.0
    timed_out: bool = False
    overdue: bool = False
    short_of: int = 0
    mlflow_experiment_id: str | None = None
    stopped: str = ""
