"""A local Ray whose raylet ends mid-search (the OOM killer's usual pick after a trial's
worker): the search stops in seconds with one line, as Ctrl-C stops it, where Tune waited
for ever for a node to run the next trial on."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from hpsearch._procs import descendants, group_running
from tests.conftest import ConfigWriter
from tests.faults.conftest import (
    Drivers,
    interrupted_and_queued_again,
    study_trials,
    two_long_trials_running,
)

pytestmark = pytest.mark.process


def _raylet(driver_pid: int) -> int:
    """The raylet of the Ray the driver started."""
    for pid in descendants(driver_pid):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if command.endswith(b"/raylet"):
            return pid
    raise AssertionError("the driver's Ray has no raylet")


def test_a_killed_raylet_stops_the_search_in_seconds_with_one_line_and_requeues_its_trials(
    write_config: ConfigWriter, project: Path, drivers: Drivers
) -> None:
    driver = two_long_trials_running(write_config, drivers)
    raylet = _raylet(driver.pid)
    killed = time.monotonic()
    os.kill(raylet, signal.SIGKILL)
    out, stderr = driver.communicate(timeout=120)
    took = time.monotonic() - killed

    assert driver.returncode == 2, stderr[-2000:]
    assert took < 30, f"it took {took:.0f} s to stop"
    assert (
        stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"error: the local Ray's raylet (pid {raylet}) was killed by signal 9 mid-search; "
        )
    ), stderr[-2000:]
    assert "Traceback" not in stderr
    assert group_running(driver.pid) is False  # the rest of its Ray is gone with it
    trials = study_trials()
    assert "RUNNING" not in {t.state.name for t in trials}
    interrupted = interrupted_and_queued_again(trials)
    assert len(interrupted) == 2, out[-2000:]
