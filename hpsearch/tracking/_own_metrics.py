"""An objective a trial's code logged to MLflow itself, read back from its own runs.

Code that already logs to MLflow (``mlflow.log_metric("val_accuracy", acc)`` in its
loop, a library's autologging) writes into runs nested under its trial's run
(:mod:`hpsearch.tracking._user_runs`). Where it reports its objective nowhere else,
the worker reads the metric's last value from those runs when the trial ends, as
its final metric: the search is judged by what the code already logs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from hpsearch.tracking._base import PARENT_TAG, STUDY_TAG, TRIAL_NUMBER_TAG
from hpsearch.tracking._user_runs import TrialOf, own_runs_go_to

logger = logging.getLogger(__name__)

_OWN_RUNS_READ = 20
"""The most of a trial's own runs read (the newest first)."""


def logged_by_own_runs(uri: str, trial: TrialOf, names: Sequence[str]) -> dict[str, float]:
    """The last values of ``names`` that the trial's own MLflow runs logged (the newest
    run that logged each); empty where none did, or the store cannot be read."""
    if not names or not own_runs_go_to(uri):
        return {}
    try:
        return _logged(uri, trial, names)
    except Exception as exc:  # the store out of reach: the trial's own outcome stands
        logger.warning("could not read what trial %s logged to MLflow: %s", trial.number, exc)
        return {}


def _logged(uri: str, trial: TrialOf, names: Sequence[str]) -> dict[str, float]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(trial.experiment)
    if experiment is None:
        return {}
    study = trial.study.replace("'", "\\'")
    trial_runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=(
            f"tags.`{STUDY_TAG}` = '{study}' and tags.`{TRIAL_NUMBER_TAG}` = '{trial.number}'"
        ),
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not trial_runs:
        return {}
    own = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`{PARENT_TAG}` = '{trial_runs[0].info.run_id}'",
        order_by=["attributes.start_time DESC"],
        max_results=_OWN_RUNS_READ,
    )
    found: dict[str, float] = {}
    for run in own:
        for name in names:
            value = run.data.metrics.get(name)
            if name not in found and value is not None:
                found[name] = float(value)
    return found
