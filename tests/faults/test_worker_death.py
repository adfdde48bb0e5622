"""A trial worker that dies hard (os._exit, SIGKILL, a segfault): recorded; the search goes on."""

from __future__ import annotations

from pathlib import Path

import pytest

import hpsearch
from hpsearch import attrs
from hpsearch.config import load_config
from hpsearch.study import open_study
from tests.conftest import ConfigWriter
from tests.faults.conftest import Drivers

# its own Ray: only a Ray hpsearch starts reaps its workers
pytestmark = [pytest.mark.process, pytest.mark.usefixtures("no_ray")]


def test_hard_deaths_keep_their_stderr_and_the_search_goes_on(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config(
        {
            "train": "tests.train_functions:dies",
            "space": {"steps": None, "how": ["exit", "kill", "segfault", "lives"]},
            "study": {"n_trials": 4},
            "execution": {"max_concurrent": 1},
        }
    )
    queued = open_study(load_config(path)).study
    for how in ("exit", "kill", "segfault", "lives"):
        queued.enqueue_trial({"x": 0.5, "how": how})

    outcome = hpsearch.run(path)

    trials = {t.params["how"]: t for t in outcome.results.study.trials}
    assert {how: t.state.name for how, t in trials.items()} == {
        "exit": "FAIL",
        "kill": "FAIL",
        "segfault": "FAIL",
        "lives": "COMPLETE",
    }
    ended = {
        "exit": "exit code 3",
        "kill": "killed by signal 9 (SIGKILL)",
        "segfault": "killed by signal 11 (SIGSEGV) (Segmentation fault)",
    }
    for how in ("exit", "kill", "segfault"):
        error = trials[how].user_attrs[attrs.ERROR]
        head, ray = error.splitlines()[:2]
        assert head == f"trial worker died: {ended[how]}", error
        assert ray == "Ray: The actor died unexpectedly before finishing this task."
        assert not trials[how].user_attrs.get(attrs.OOM)  # no host OOM: the kernel killed none
        number = trials[how].number
        assert f"trial {number} about to die: {how}" in error  # its own stderr line
    assert "(Segmentation fault)" in trials["segfault"].user_attrs[attrs.ERROR]


def test_a_dead_worker_is_one_line_of_the_command_not_tunes_traceback(
    write_config: ConfigWriter, project: Path, drivers: Drivers
) -> None:
    path = write_config(
        {
            "train": "tests.train_functions:dies",
            "space": {
                "x": {"type": "float", "low": 0.6, "high": 1.0},
                "how": "exit",
                "steps": None,
            },
            "study": {"n_trials": 1},
        }
    )
    driver = drivers.start(path)
    _, err = driver.communicate(timeout=120)

    assert driver.returncode == 1, err[-2000:]
    assert err.strip().splitlines() == [
        "error: no trial of study 'test-study' completed (1 failed, 0 pruned); most common "
        "(1 trial(s)): trial worker died: exit code 3"
    ]
