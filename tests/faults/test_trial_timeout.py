"""A trial that hangs is stopped at ``execution.trial_timeout``, or once it has been still
(no CPU time, no report) for ``execution.hang_timeout``, and the search goes on."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

import hpsearch
from hpsearch import attrs
from hpsearch._procs import processes
from hpsearch.config import load_config
from hpsearch.study import open_study
from tests.conftest import ConfigWriter, mlflow_client, wait_for
from tests.faults.conftest import Drivers

# the search starts a Ray of its own
pytestmark = [pytest.mark.process, pytest.mark.usefixtures("no_ray")]


def test_a_hung_trial_ends_fail_with_reason_timeout_and_its_last_step(
    write_config: ConfigWriter, project: Path, capfd: pytest.CaptureFixture[str]
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
        # Ended at the limit, from its worker's start, give or take the worker's look:
        # not the hour it would hang. The search's own time is mostly Ray's start and the
        # workers': 53.7 s in CI once, beside the other tests.
        ran = trials[x].user_attrs[attrs.DURATION]
        assert 4 <= ran < 4 + 10, ran
    assert took < 240, f"the search took {took:.0f} s"
    # Each trial's line says it timed out; Ray's "A worker died ... unexpected system
    # error" (naming the OOM killer and SIGSEGV) is not printed before it.
    assert "A worker died" not in capfd.readouterr().out


def test_a_stopped_worker_and_one_holding_the_gil_are_killed_by_the_driver(
    write_config: ConfigWriter, project: Path
) -> None:
    # Neither worker can end itself at the limit: the driver kills both from outside.
    path = write_config(
        {
            "train": "tests.train_functions:stuck",
            "space": {"steps": None, "how": {"type": "categorical", "choices": ["sigstop", "gil"]}},
            "study": {"n_trials": 3},
            "execution": {"trial_timeout": 2},
        }
    )
    queued = open_study(load_config(path)).study
    for x, how in ((0.9, "sigstop"), (0.8, "gil"), (0.2, "gil")):
        queued.enqueue_trial({"x": x, "how": how})

    started = time.monotonic()
    outcome = hpsearch.run(path)
    took = time.monotonic() - started

    trials = {t.params["x"]: t for t in outcome.results.study.trials}
    assert {x: t.state.name for x, t in trials.items()} == {
        0.9: "FAIL",
        0.8: "FAIL",
        0.2: "COMPLETE",
    }
    for x in (0.9, 0.8):
        error = trials[x].user_attrs[attrs.ERROR]
        assert error == (
            "timeout: ran past execution.trial_timeout (2 s) did not end, and was killed "
            "by the driver; last reported step: 0"
        )
        # Killed from its worker's start at the limit and the 5 s the driver grants (as
        # documented), give or take the driver's look: not the hour it would hang. The
        # search's own time is mostly Ray's start and the workers': 64-85 s in
        # fresh-clone make test runs on a slow day, 18 s on a quiet one.
        ran = trials[x].user_attrs[attrs.DURATION]
        assert 2 + 5 <= ran < 2 + 5 + 10, ran
    assert took < 240, f"the search took {took:.0f} s"


def test_a_trial_past_its_limit_when_the_search_is_interrupted_is_not_run_again(
    write_config: ConfigWriter, project: Path, drivers: Drivers
) -> None:
    path = write_config(
        {
            "train": "tests.train_functions:stuck",
            "space": {"steps": None, "how": "sigstop"},
            "study": {"n_trials": 1},
            "execution": {"trial_timeout": 2},
        }
    )
    study = open_study(load_config(path)).study
    study.enqueue_trial({"x": 0.9})
    driver = drivers.start(path)

    def past_its_limit() -> bool:
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        start = running[0].datetime_start if running else None
        launched = bool(running) and attrs.ASSIGNED in running[0].user_attrs
        return launched and start is not None and time.time() - start.timestamp() > 3.0

    wait_for(past_its_limit, 240, "the trial stuck past its limit", process=driver)
    os.killpg(driver.pid, signal.SIGINT)  # Ctrl-C, before the driver's kill
    _, err = driver.communicate(timeout=60)

    assert driver.returncode == 130, err[-2000:]
    trials = study.get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["FAIL"]  # failed, and nothing queued again
    assert trials[0].user_attrs[attrs.ERROR].startswith("timeout: ran past execution.trial_timeout")


def test_a_command_trial_past_its_limit_leaves_none_of_its_processes(
    write_config: ConfigWriter, project: Path
) -> None:
    # The script starts a child that ignores SIGTERM and one that left its group (setsid),
    # then hangs: the worker ends itself at the limit, and takes them along.
    pids = project / "pids"
    child = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    (project / "hang.py").write_text(
        "import json, subprocess, sys, time\n"
        f"kids = [subprocess.Popen([sys.executable, '-c', {child!r}], start_new_session=new)\n"
        "        for new in (False, True)]\n"
        f"open({str(pids)!r}, 'w').write(' '.join(str(k.pid) for k in kids))\n"
        "print(json.dumps({'step': 0, 'score': 0.5}), flush=True)\n"
        "time.sleep(600)\n"
    )
    path = write_config(
        {
            "train": {"command": "python hang.py {args}"},  # ignored: the script hangs
            "space": {"steps": None},
            "study": {"n_trials": 1},
            "execution": {"trial_timeout": 3},
        }
    )
    outcome = hpsearch.run(path)

    (trial,) = outcome.results.study.trials
    assert trial.user_attrs[attrs.ERROR].startswith("timeout: ran past execution.trial_timeout")
    for pid in map(int, pids.read_text().split()):
        assert not _running(pid), f"process {pid} outlived its trial"


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    found = [p for p in processes() if p.pid == pid]
    return bool(found) and found[0].state != "Z"


def test_a_still_trial_is_ended_as_hung_and_a_busy_or_polling_one_is_not(
    write_config: ConfigWriter, project: Path
) -> None:
    limit = 2
    path = write_config(
        {
            "train": "tests.train_functions:still",
            "space": {
                "how": {"type": "categorical", "choices": ["deadlock", "child", "busy", "poll"]},
                "work_s": 2 * limit,  # past the limit, without a report
            },
            "study": {"n_trials": 4},
            "execution": {"hang_timeout": limit, "max_concurrent": 4, "cpus_per_trial": 0.5},
        }
    )
    queued = open_study(load_config(path)).study
    for x, how in ((0.1, "deadlock"), (0.2, "child"), (0.3, "busy"), (0.4, "poll")):
        queued.enqueue_trial({"x": x, "how": how})

    outcome = hpsearch.run(path)

    trials = {t.params["how"]: t for t in outcome.results.study.trials}
    assert {how: t.state.name for how, t in trials.items()} == {
        "deadlock": "FAIL",
        "child": "FAIL",
        "busy": "COMPLETE",
        "poll": "COMPLETE",
    }
    for how in ("deadlock", "child"):
        error = trials[how].user_attrs[attrs.ERROR]
        assert error.startswith(
            f"hung: used no CPU time and reported nothing for execution.hang_timeout ({limit} s)"
        ), error
        assert "last reported step: 0" in error
        # Ended near the limit after its report, not the hour it would wait.
        assert trials[how].user_attrs[attrs.DURATION] < limit + 10
    # The sleeping child went with its trial's worker.
    assert not [
        p for p in processes() if p.state != "Z" and _cmdline(p.pid).endswith("sleep(3600)")
    ]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""
