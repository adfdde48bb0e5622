"""A driver killed with SIGKILL mid-search, and the search run again at once."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from optuna.storages import RetryHeartbeatStaleTrialCallback

from hpsearch._procs import descendants, processes, start_time
from tests.conftest import ConfigWriter, mlflow_client, wait_for
from tests.faults.conftest import Drivers, record_figures, study_trials

pytestmark = pytest.mark.process

TRIAL_S = 2.5
N_TRIALS = 6  # two moments with one done and two running: a loaded machine's look can miss one
GRACE_S = 10  # study.heartbeat_grace (30 s by default)


def test_a_rerun_right_after_a_kill_reclaims_the_dead_drivers_trials_and_finishes(
    write_config: ConfigWriter, project: Path, drivers: Drivers
) -> None:
    path = write_config(
        {
            "train": "tests.train_functions:timed",
            "space": {"sleep": TRIAL_S, "steps": None},
            "study": {"n_trials": N_TRIALS, "heartbeat_grace": GRACE_S},
        }
    )
    # A temp root of its own (short: Ray's sockets live under it), to find its processes
    # and the search's scratch folder.
    root = Path(tempfile.mkdtemp(prefix="rk", dir="/tmp"))
    first = drivers.start(path, env={**os.environ, "RAY_TMPDIR": str(root), "TMPDIR": str(root)})

    # Ray's processes: the driver's descendants (the agents' command lines name no folder),
    # read before the study, so that the kill follows the read that found two running
    # at once (on a slow machine both could end in between, and none be left to reclaim).
    its_ray: dict[int, int | None] = {}

    seen: list[str] = []

    def one_done_two_running() -> bool:
        # A driver that ended (its search done, every moment missed) fails at once.
        assert first.poll() is None, f"the driver ended first: {first.communicate()[1][-2000:]}"
        its_ray.clear()
        its_ray.update({pid: start_time(pid) for pid in descendants(first.pid)})
        seen[:] = [t.state.name for t in study_trials()]
        return seen.count("COMPLETE") >= 1 and seen.count("RUNNING") == 2

    try:
        wait_for(one_done_two_running, 240, "a completed trial and two running")
    except AssertionError as missed:
        raise AssertionError(f"{missed}; the trials last seen: {seen}") from None
    os.kill(first.pid, signal.SIGKILL)  # the driver only, as `kill -9 PID` would
    first.communicate()
    before = {t.number: t.value for t in study_trials() if t.state.name == "COMPLETE"}

    def its_ray_is_gone() -> bool:
        found = subprocess.run(["pgrep", "-f", str(root)], capture_output=True, check=False)
        live = {p.pid: p for p in processes() if p.state != "Z"}
        left = [pid for pid, at in its_ray.items() if pid in live and start_time(pid) == at]
        return found.stdout.strip() == b"" and not left

    # Ray's processes (GCS, raylet, agents, workers) do not outlive the killed driver:
    # left alone, its agents would live about a minute.
    wait_for(its_ray_is_gone, 15, "the killed driver's Ray processes to end")
    # Nor does the search's scratch folder (the trials' output, the workers' exits).
    wait_for(lambda: not list(root.glob("hpsearch-*")), 5, "its scratch folder to go")
    shutil.rmtree(root, ignore_errors=True)

    started = time.monotonic()
    rerun = drivers.start(path)
    # Without reclaiming while Tune idles, the rerun would sit for 600 s.
    _, stderr = rerun.communicate(timeout=GRACE_S + 120)
    took = time.monotonic() - started

    assert rerun.returncode == 0, stderr[-2000:]
    trials = study_trials()
    done = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(done) == N_TRIALS
    assert not [t for t in trials if t.state.name in {"RUNNING", "WAITING"}]
    # Nothing completed before the kill was lost or changed.
    assert {t.number: t.value for t in done if t.number in before} == before
    # The dead driver's running trials were failed and run again (two, give or take
    # one that ended or was asked for between the last look and the kill).
    lost = [t for t in trials if t.state.name == "FAIL"]
    assert 1 <= len(lost) <= 3
    retried = [RetryHeartbeatStaleTrialCallback.retried_trial_number(t) for t in done]
    assert sorted(n for n in retried if n is not None) == sorted(t.number for t in lost)
    # Ray start, the grace period, then at most two rounds of trials: no long idle.
    assert took < GRACE_S + 60, f"the rerun took {took:.0f} s"
    record_figures(
        fault="driver killed, rerun at once",
        rerun_s=round(took, 1),
        grace_s=GRACE_S,
        work_s=TRIAL_S * math.ceil((N_TRIALS - 1) / 2),  # the rest of the budget, two at a time
    )
    # The killed driver's MLflow runs (its parent and its trials') were ended KILLED.
    client = mlflow_client(project)
    experiment = client.get_experiment_by_name("test-study")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert sorted(r.info.status for r in parents) == ["FINISHED", "KILLED"]
    assert not [r for r in runs if r.info.status == "RUNNING"]
