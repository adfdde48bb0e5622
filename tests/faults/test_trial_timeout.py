"""A trial that hangs is stopped at ``execution.trial_timeout`` and the search goes on."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import hpsearch
from hpsearch import attrs
from hpsearch.config import load_config
from hpsearch.study import open_study
from tests.conftest import ConfigWriter, mlflow_client

# the search starts a Ray of its own
pytestmark = [pytest.mark.process, pytest.mark.usefixtures("no_ray")]


def test_a_hung_trial_ends_fail_with_reason_timeout_and_its_last_step(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config(
        {
            "train": "tests.train_functions:hangs",
            "space": {"steps": None},
            "study": {"n_trials": 4},
            "execution": {"trial_timeout": 4},
        }
    )
    queued = open_study(load_config(path)).study
    for x in (0.9, 0.2, 0.8, 0.3):  # two hang after their first report, two finish
        queued.enqueue_trial({"x": x})

    started = time.monotonic()
    outcome = hpsearch.run(path)
    took = time.monotonic() - started

    trials = {t.params["x"]: t for t in outcome.results.study.trials}
    assert {x: t.state.name for x, t in trials.items()} == {
        0.9: "FAIL",
        0.2: "COMPLETE",
        0.8: "FAIL",
        0.3: "COMPLETE",
    }
    for x in (0.9, 0.8):
        error = trials[x].user_attrs[attrs.ERROR]
        assert error.startswith("timeout: ran past execution.trial_timeout (4 s)"), error
        assert error.endswith("last reported step: 0")
        run = mlflow_client(project).get_run(trials[x].user_attrs[attrs.MLFLOW_RUN])
        assert run.info.status == "FAILED"
        assert run.data.tags["hpsearch.error"].startswith("timeout:")
    assert took < 60, f"the search took {took:.0f} s"  # not the hour the trials would hang
