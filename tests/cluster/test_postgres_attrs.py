"""A trial's attributes in PostgreSQL, written in one statement that checks the trial runs.

hpsearch.study writes several user attributes of a trial as one upsert whose rows
exist only while the trial has not finished (Optuna's own check, in the statement);
the same refusals as Optuna's setter, and a late attribute still written.
"""

from __future__ import annotations

import optuna
import pytest
from optuna.exceptions import UpdateFinishedTrialError

from hpsearch.study import set_user_attr_late, set_user_attrs
from tests.cluster.conftest import Postgres

pytestmark = pytest.mark.process  # a PostgreSQL server


def test_attributes_are_upserted_while_the_trial_runs_and_refused_once_it_ended(
    postgres: Postgres,
) -> None:
    url = postgres.create_database("attrs")
    study = optuna.create_study(storage=url, study_name="s")
    trial = study.ask()

    set_user_attrs(trial, {"seed": 1, "resources": {"cpus": 1.0}})
    set_user_attrs(trial, {"seed": 7})  # one attribute, over an earlier value
    set_user_attr_late(study._storage, trial, "run", "pending")  # running: a plain write

    expected = {"seed": 7, "resources": {"cpus": 1.0}, "run": "pending"}
    assert optuna.load_study(study_name="s", storage=url).trials[0].user_attrs == expected
    study.tell(trial, 1.0)
    with pytest.raises(UpdateFinishedTrialError, match="has already finished"):
        set_user_attrs(trial, {"seed": 8, "late": True})
    set_user_attr_late(study._storage, trial, "run", "abc")  # ended: still recorded
    stored = optuna.load_study(study_name="s", storage=url).trials[0].user_attrs
    assert stored == {**expected, "run": "abc"}
