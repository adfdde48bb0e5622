"""The MLflow run context provider that nests a trial's own runs under the trial's run.

Registered with MLflow by hpsearch's ``mlflow.run_context_provider`` entry point, so it
serves every process with hpsearch installed: a trial's worker, and a training script
a command trial runs. It acts only in a trial (:data:`~hpsearch.tracking._user_runs.
TRIAL_ENV` set, by :func:`~hpsearch.tracking._user_runs.trial_runs`). When the trial's
code opens a run, MLflow asks it for tags: the run's parent is then the trial's run,
found in the search's experiment by the study's name and the trial's number (its
``optuna.*`` tags), and ``hpsearch.trial`` names the trial. A run opened in another
experiment (the code's own ``mlflow.set_experiment``) is only named so; a nested run
keeps the parent MLflow gives it (MLflow's own tags win over a provider's).
"""

from __future__ import annotations

import logging
import os
import sys

from mlflow.tracking.context.abstract_context import RunContextProvider

from hpsearch.tracking._base import PARENT_TAG, STUDY_TAG, TRIAL_NUMBER_TAG
from hpsearch.tracking._user_runs import TrialOf

logger = logging.getLogger(__name__)

TRIAL_TAG = "hpsearch.trial"
"""On a run a trial's own code opened: the trial's number."""


class TrialRunContext(RunContextProvider):
    """Tags a run the code of a trial opens with its trial, and nests it under the trial's run."""

    def in_context(self) -> bool:
        return TrialOf.from_env() is not None

    def tags(self) -> dict[str, str]:
        trial = TrialOf.from_env()
        if trial is None:
            return {}
        tags = {TRIAL_TAG: str(trial.number)}
        try:
            parent = _trial_run(trial)
        except Exception as exc:  # never in the way of the code's own run
            logger.debug("the run of trial %s was not found: %s", trial.number, exc)
            parent = None
        if parent is not None:
            tags[PARENT_TAG] = parent
        return tags


def _trial_run(trial: TrialOf) -> str | None:
    """The trial's running run, if the run being opened goes to the search's experiment."""
    # Imported here: MLflow loads this module while it imports mlflow.tracking itself.
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    experiment = client.get_experiment_by_name(trial.experiment)
    if experiment is None or _experiment_of_new_run() != experiment.experiment_id:
        return None
    study = trial.study.replace("'", "\\'")
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=(
            f"tags.`{STUDY_TAG}` = '{study}' and tags.`{TRIAL_NUMBER_TAG}` = '{trial.number}' "
            "and attributes.status = 'RUNNING'"
        ),
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return str(runs[0].info.run_id) if runs else None


def _experiment_of_new_run() -> str | None:
    """The experiment of the run ``mlflow.start_run`` is opening (``None``: not known).

    MLflow tells a provider nothing of the run, and code may name its experiment in the
    call (Ray's ``setup_mlflow`` does); ``start_run`` has settled it, as its local
    ``exp_id_for_run``, before it asks for tags (private: checked by the tests).
    """
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "start_run" and code.co_filename.endswith(_FLUENT):
            found = frame.f_locals.get("exp_id_for_run")
            return str(found) if found is not None else None
        frame = frame.f_back  # type: ignore[assignment]
    return None


_FLUENT = os.path.join("mlflow", "tracking", "fluent.py")
