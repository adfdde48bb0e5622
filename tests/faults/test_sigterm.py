"""SIGTERM (a scheduler's stop, ``timeout``, ``docker stop``) and SIGHUP (a closed terminal
or SSH session) stop a search as Ctrl-C does."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from hpsearch._procs import group_running
from hpsearch.interrupts import EXIT_TERMINATED
from tests.conftest import ConfigWriter, mlflow_client
from tests.faults.conftest import (
    Drivers,
    interrupted_and_queued_again,
    study_trials,
    two_long_trials_running,
)

pytestmark = pytest.mark.process


@pytest.mark.parametrize(
    ("signum", "to"),
    [
        (signal.SIGTERM, "the driver"),
        (signal.SIGTERM, "its process group"),
        (signal.SIGHUP, "its process group"),
    ],
)
def test_a_stop_signal_requeues_running_trials_ends_runs_killed_and_exits_128_plus_it(
    write_config: ConfigWriter, project: Path, drivers: Drivers, signum: signal.Signals, to: str
) -> None:
    # To its group (systemd, Slurm's scancel, `timeout` send SIGTERM so; a closing terminal
    # sends SIGHUP so), Ray's own processes are stopped with the driver: it closes out
    # without them, as for Ctrl-C.
    driver = two_long_trials_running(write_config, drivers)
    started = time.monotonic()
    if to == "the driver":
        driver.send_signal(signum)
    else:
        os.killpg(driver.pid, signum)  # started in a session of its own
    out, stderr = driver.communicate(timeout=120)
    took = time.monotonic() - started

    assert driver.returncode == 128 + signum, stderr[-2000:]
    assert EXIT_TERMINATED == 143
    assert took < 20, f"it took {took:.0f} s to stop"
    if to == "the driver":
        assert "2 trial(s) were interrupted and will run again" in out
    else:
        # Where Ray's control store is gone within seconds, the driver closes out without
        # it and says so; where it outlives that (a loaded machine: seen in a full run),
        # the driver's own Ctrl-C close-out ends first. Both end as below.
        lines = stderr.strip().splitlines()
        without_ray = bool(lines) and lines[-1].startswith(f"terminated ({signum.name}); Ray's own")
        as_ctrl_c = "2 trial(s) were interrupted and will run again" in out
        assert without_ray or as_ctrl_c, (out[-2000:], stderr[-2000:])
        assert group_running(driver.pid) is False  # Ray's processes are gone with it
    assert "*** SIG" not in stderr  # no C++ signal dump
    assert "Traceback" not in stderr
    trials = study_trials()
    interrupted = interrupted_and_queued_again(trials)
    assert len(interrupted) == 2
    client = mlflow_client(project)
    experiment = client.get_experiment_by_name("test-study")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    assert sorted(r.info.status for r in runs) == ["KILLED"] * 3  # the parent and two trials
