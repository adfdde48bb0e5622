"""The libraries' chatter a search keeps from its user (the progress view says it once)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

# Loggers that narrate what the progress view already shows, or warn about
# files hpsearch tells Tune not to write (it keeps results in Optuna and MLflow).
_QUIET = {
    "optuna": logging.WARNING,
    "mlflow": logging.WARNING,
    "alembic": logging.WARNING,
    "ray.tune.analysis.experiment_analysis": logging.ERROR,
    # On Ctrl-C Tune advises Tuner.restore; with hpsearch, running again resumes.
    "ray.tune.tune": logging.ERROR,
    "ray._private.authentication.authentication_token_setup": logging.ERROR,
    # It logs each database error with its traceback, then raises it: a full disk
    # or a locked store reaches the user once, as one line (hpsearch.storage_faults).
    "mlflow.store.db.utils": logging.CRITICAL,
    # Tune's copy of its experiment state, which hpsearch does not use (the Optuna
    # study is the checkpoint): failing to write it is no news to the user.
    "ray.tune.execution.experiment_state": logging.CRITICAL,
}


@contextmanager
def quiet_libraries() -> Iterator[None]:
    """While a search runs: its libraries' loggers lowered to what the user needs."""
    loggers = {name: logging.getLogger(name) for name in _QUIET}
    previous = {name: logger.level for name, logger in loggers.items()}
    for name, logger in loggers.items():
        logger.setLevel(_QUIET[name])
    # MLflow prints "View run ... at: URL" for every run it ends on a tracking server;
    # the search prints the runs table's address once.
    printing = os.environ.get(_MLFLOW_URL_PRINTING)
    os.environ[_MLFLOW_URL_PRINTING] = "true"
    tune_loggers = [logging.getLogger(name) for name in _TRIAL_FAILURE_LOGGERS]
    for logger in tune_loggers:
        logger.addFilter(_drop_trial_failures)
    try:
        yield
    finally:
        for logger in tune_loggers:
            logger.removeFilter(_drop_trial_failures)
        for name, logger in loggers.items():
            logger.setLevel(previous[name])
        if printing is None:
            os.environ.pop(_MLFLOW_URL_PRINTING, None)
        else:
            os.environ[_MLFLOW_URL_PRINTING] = printing


_MLFLOW_URL_PRINTING = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"


_TRIAL_FAILURE_LOGGERS = ("ray.tune.execution.tune_controller", "ray.tune.tune")


def _drop_trial_failures(record: logging.LogRecord) -> bool:
    """Tune's "Trial task failed" with Ray's traceback (two dozen lines per dead worker)
    and its closing "Trials did not complete": each trial's record has the cause, and
    its line in the progress view says it."""
    return not record.getMessage().startswith(("Trial task failed", "Trials did not complete"))
