"""``study.timeout`` with a grace stops trials that hang on, and a short search says so."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hpsearch import attrs
from hpsearch.cli import EXIT_STOPPED_SHORT
from hpsearch.config import load_config
from hpsearch.study import open_study
from tests.conftest import ConfigWriter, hpsearch_cli, mlflow_client
from tests.faults.conftest import record_figures, study_trials

pytestmark = pytest.mark.process

TIMEOUT_S, GRACE_S = 6, 4
STOP_SLACK_S = 30
"""How late past the timeout and its grace a stopped trial may end: the stop itself (5 s
here alone: Ray's stop, then the kill of the one that cannot hear it) on a busy machine."""


def test_trials_asleep_or_stopped_past_the_timeout_and_its_grace_are_stopped_and_requeued(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config(
        {
            "train": "tests.train_functions:stuck",
            "space": {"steps": None, "how": ["sleep", "sigstop"]},
            "study": {"n_trials": 4, "timeout": TIMEOUT_S, "timeout_grace": GRACE_S},
            "execution": {"max_concurrent": 2},
        }
    )
    queued = open_study(load_config(path)).study
    # Both report step 0, then hang for an hour: one asleep, which Ray's own stop
    # reaches, and one stopped (SIGSTOP), which only the driver's kill ends.
    queued.enqueue_trial({"x": 0.9, "how": "sleep"})
    queued.enqueue_trial({"x": 0.8, "how": "sigstop"})

    started = time.monotonic()
    result = hpsearch_cli("run", str(path), timeout=240)  # a hang's backstop
    took = time.monotonic() - started

    assert result.returncode == EXIT_STOPPED_SHORT == 3, result.stderr[-2000:]
    assert "2 trial(s) were interrupted and will run again" in result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("stopped short: study.timeout (6 s) ended the search 4 trial(s) short")
    trials = study_trials(while_running=False)
    stopped = [t for t in trials if t.state.name == "FAIL"]
    assert sorted(t.params["x"] for t in stopped) == [0.8, 0.9]
    for trial in stopped:
        assert trial.user_attrs[attrs.OUTCOME] == "interrupted"
        assert (
            "4 s (study.timeout_grace) after study.timeout (6 s)" in trial.user_attrs[attrs.ERROR]
        )
        # Stopped at the timeout and its grace, not the hour it would hang: its own time,
        # from its start (the search's clock running by then) to its end. (What the
        # search's start adds, Ray's on a busy machine, is not the trial's.)
        assert trial.datetime_start is not None
        assert trial.datetime_complete is not None
        ran = (trial.datetime_complete - trial.datetime_start).total_seconds()
        assert ran < TIMEOUT_S + GRACE_S + STOP_SLACK_S, f"trial {trial.number} ran {ran:.1f} s"
    retries = [t for t in trials if t.state.name == "WAITING"]
    assert sorted(t.user_attrs[attrs.RETRY_OF] for t in retries) == sorted(
        t.number for t in stopped
    )
    assert not [t for t in trials if t.state.name == "RUNNING"]
    client = mlflow_client(project)
    experiment = client.get_experiment_by_name("test-study")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    assert sorted(r.info.status for r in runs) == ["KILLED"] * 3  # the parent and two trials
    record_figures(
        fault="trials still running after study.timeout and its grace (asleep, stopped)",
        took_s=round(took, 1),
        timeout_s=TIMEOUT_S,
        grace_s=GRACE_S,
    )
