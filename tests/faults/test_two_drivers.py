"""Two drivers started on one config at the same moment, on fresh SQLite stores."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ConfigWriter
from tests.faults.conftest import Drivers, study_trials

pytestmark = pytest.mark.process

N_TRIALS = 8


def test_two_drivers_share_the_budget_without_crashing_or_repeating(
    write_config: ConfigWriter, project: Path, drivers: Drivers
) -> None:
    path = write_config(
        {
            "train": "tests.train_functions:timed",
            "space": {"sleep": 1.0, "steps": None},
            "study": {"n_trials": N_TRIALS},
            "execution": {"max_concurrent": 1},
        }
    )
    first, second = drivers.start(path), drivers.start(path)  # fresh stores: both create them
    outputs = [process.communicate(timeout=300) for process in (first, second)]

    for process, (_, stderr) in zip((first, second), outputs, strict=True):
        assert process.returncode == 0, stderr[-3000:]
    trials = study_trials()
    done = [t for t in trials if t.state.name == "COMPLETE"]
    # Together they stop at the budget: each counts and asks for a trial under a lock
    # beside the study's database, so they do not both take the last one.
    assert len(done) == N_TRIALS
    assert not [t for t in trials if t.state.name in {"RUNNING", "WAITING", "FAIL"}]
    # Their samplers do not replay one stream: no configuration ran twice.
    xs = [t.params["x"] for t in done]
    assert len(set(xs)) == len(xs)
    # Each says what it ran itself, and between them they ran every trial.
    ran = [int(out.split("finished ")[1].split(" trial")[0]) for out, _ in outputs]
    assert sum(ran) == len(done)
    assert min(ran) >= 1
