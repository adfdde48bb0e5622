"""A search whose study and MLflow runs are both in PostgreSQL: a writer process records the runs.

``tracking.writer: auto`` hands a database server's writes to a process of its own
(hpsearch.tracking.ProcessTracker); the search's records must come out as the
driver's own writes made them: one run per trial, ended, with its metrics, and each
trial naming its run.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import hpsearch
from hpsearch import attrs
from hpsearch.runner import SimulatedRunner
from hpsearch.tracking import TRIAL_NUMBER_TAG
from tests.cluster.conftest import Postgres
from tests.conftest import ConfigWriter, load_search, merge

pytestmark = pytest.mark.process  # a PostgreSQL server, and the tracking writer


def test_a_search_recorded_in_postgresql_by_the_writer_process_names_every_trials_run(
    write_config: ConfigWriter, project: Path, postgres: Postgres
) -> None:
    tracking = postgres.create_database("runs")
    search = merge(
        load_search(util=30, memory=500, trials=12, seconds=2),
        {
            "study": {"name": "pg", "storage": postgres.create_database("study")},
            "tracking": {"uri": tracking},
        },
    )
    path = write_config(search)

    outcome = hpsearch.run(path, runner=SimulatedRunner())

    assert outcome.finished == 12
    client = MlflowClient(tracking)
    parent = client.get_run(str(outcome.mlflow_parent_run_id))  # the store's id, not a stand-in
    assert parent.info.status == "FINISHED"
    runs = client.search_runs([parent.info.experiment_id], max_results=1000)
    children = [run for run in runs if TRIAL_NUMBER_TAG in run.data.tags]
    assert Counter(int(run.data.tags[TRIAL_NUMBER_TAG]) for run in children) == Counter(range(12))
    assert {run.info.status for run in runs} == {"FINISHED"}
    by_id = {run.info.run_id: run for run in children}
    for trial in outcome.results.study.get_trials():
        run = by_id[trial.user_attrs[attrs.MLFLOW_RUN]]  # named on the trial, found in MLflow
        assert run.data.tags[TRIAL_NUMBER_TAG] == str(trial.number)
        assert run.data.metrics["val_accuracy"] == pytest.approx(trial.value)
    again = hpsearch.load(path).trials  # a fresh read of the study names them too
    assert {t.number: t.mlflow_run_id for t in again} == {
        t.number: t.user_attrs[attrs.MLFLOW_RUN] for t in outcome.results.study.get_trials()
    }
