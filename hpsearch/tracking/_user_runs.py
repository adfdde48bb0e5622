"""Where the MLflow calls of a trial's own code go: the search's store and experiment.

Code that already logs to MLflow (``mlflow.log_metric`` in its loop, ``mlflow.autolog()``,
Ray's ``setup_mlflow``, Optuna's ``track_in_mlflow``) runs in a trial unchanged. Left to
MLflow's defaults it would write ``./mlflow.db`` in the working directory, beside but
apart from the search's store (``hpsearch ui`` would not show it), and the first trials
of a search, starting at once, would race to create that file (one of them failed with
alembic's "No such index"). In a trial, :func:`trial_runs` points MLflow's defaults at the
search's store and experiment instead, and the runs the code opens there are nested under
its trial's run (:mod:`hpsearch.tracking._user_runs_context`, an MLflow run context
provider). What the code chooses itself wins: its own ``MLFLOW_TRACKING_URI``,
``mlflow.set_tracking_uri`` or ``mlflow.set_experiment``.

Light (MLflow is not imported here): every trial's worker enters it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

logger = logging.getLogger(__name__)

TRIAL_ENV = "HPSEARCH_MLFLOW_TRIAL"
"""The trial whose code runs, for the run context provider: JSON of :class:`TrialOf`."""

# What a trial's block sets, and what MLflow itself may set in it (mlflow.set_experiment
# sets MLFLOW_EXPERIMENT_ID, which the next trial of a reused worker would inherit): each
# put back as it was.
_KEPT = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_EXPERIMENT_NAME",
    TRIAL_ENV,
    "MLFLOW_EXPERIMENT_ID",
    "MLFLOW_RUN_ID",
)


@dataclass(frozen=True)
class TrialOf:
    """The trial a process's MLflow runs are nested under: its study and number, in its
    search's experiment."""

    experiment: str
    study: str
    number: int

    def dumps(self) -> str:
        """As :data:`TRIAL_ENV` holds it."""
        return json.dumps(
            {"experiment": self.experiment, "study": self.study, "number": self.number}
        )

    @classmethod
    def from_env(cls) -> TrialOf | None:
        """The trial :data:`TRIAL_ENV` names (``None``: not in a trial, or unreadable)."""
        text = os.environ.get(TRIAL_ENV)
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(str(data["experiment"]), str(data["study"]), int(data["number"]))
        except (ValueError, KeyError, TypeError):
            return None


@contextmanager
def trial_runs(uri: str, trial: TrialOf) -> Iterator[None]:
    """While a trial's code runs: MLflow's defaults point at the search's store ``uri`` and
    its experiment, and runs it opens there are nested under the trial's run. Afterwards
    the environment is as it was, and the runs still open are ended (the block ends those
    of a trial that returned with its outcome, :func:`end_open_runs`; what is left, as
    ``FINISHED``, or ``FAILED`` if the block raised).

    A user's own ``MLFLOW_TRACKING_URI`` is left as it is (their runs go where they
    said), and so is a store this machine cannot reach (a SQLite file on the driver's
    machine, seen from another node).
    """
    saved = {name: os.environ.get(name) for name in _KEPT}
    if own_runs_go_to(uri):
        os.environ["MLFLOW_TRACKING_URI"] = uri
        if "MLFLOW_EXPERIMENT_NAME" not in os.environ and "MLFLOW_EXPERIMENT_ID" not in os.environ:
            os.environ["MLFLOW_EXPERIMENT_NAME"] = trial.experiment
        os.environ[TRIAL_ENV] = trial.dumps()
    failed = True
    try:
        yield
        failed = False
    finally:
        end_open_runs("FAILED" if failed else "FINISHED")
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def own_runs_go_to(uri: str) -> bool:
    """Whether the trial's MLflow defaults may point at ``uri``: the user named no store
    of their own, and this machine reaches it."""
    if os.environ.get("MLFLOW_TRACKING_URI", uri) != uri:
        return False
    if uri.startswith("sqlite:///"):
        # A SQLite store is a file on the driver's machine: another node would make an
        # empty one of its own at that path.
        return os.path.exists(uri.removeprefix("sqlite:///").split("?", 1)[0])
    return True


def end_open_runs(status: str) -> None:
    """End the MLflow runs a trial's code left open in this thread, with ``status``
    (MLflow's name); nothing where the code never imported MLflow."""
    mlflow = sys.modules.get("mlflow")
    if mlflow is None:
        return
    try:
        while mlflow.active_run() is not None:
            mlflow.end_run(status)
    except Exception as exc:  # the store out of reach: the trial's own outcome stands
        logger.warning("could not end the MLflow runs the trial left open: %s", exc)
