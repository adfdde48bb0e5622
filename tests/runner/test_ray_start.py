"""Ray failing to start: tried once more where its raylet was slow, else one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpsearch.runner._cluster import (
    RayStartTimedOut,
    _stop_half_started,
    start_once_more_if_slow,
)
from tests.conftest import ConfigWriter, hpsearch_cli, mlflow_client

pytestmark = pytest.mark.process

# Ray 2.60's words when its raylet misses its hard-coded 30 s (ray/_private/node.py).
SLOW = (
    "The current node timed out during startup. This could happen because some of the "
    "raylet failed to startup or the GCS has become overloaded."
)


def test_a_slow_start_is_tried_once_more_and_what_it_left_is_stopped() -> None:
    left: list[subprocess.Popen[bytes]] = []

    def start() -> str:
        if not left:  # the first start leaves a process behind (its raylet), and times out
            left.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
            raise Exception(SLOW)  # Ray raises exactly this
        return "started"

    assert start_once_more_if_slow(start, _stop_half_started) == "started"
    assert left[0].wait(timeout=10) == -9  # stopped before the second start


def test_a_start_slow_twice_is_one_line_saying_what_was_waited_for_and_what_to_try() -> None:
    stopped: list[set[int]] = []

    def start() -> str:
        raise Exception(SLOW)

    with pytest.raises(RayStartTimedOut) as raised:
        start_once_more_if_slow(start, stopped.append)
    line = str(raised.value)
    assert len(stopped) == 2
    assert "\n" not in line
    assert line.startswith(
        "cannot start a local Ray: twice its raylet did not register with its control store "
        "within Ray's 30 s (load average "
    )
    assert line.endswith(
        "run again when the machine is less busy, or start Ray once yourself "
        "(ray start --head --num-cpus N) and set execution.address: auto"
    )


def test_another_failure_to_start_is_not_tried_again() -> None:
    calls: list[int] = []

    def start() -> str:
        calls.append(1)
        raise ValueError("num_gpus must be a number")

    with pytest.raises(ValueError, match="num_gpus"):
        start_once_more_if_slow(start, lambda started: None)
    assert calls == [1]


def test_a_ray_that_cannot_be_reached_is_one_line_exit_2_and_the_parent_run_failed(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config({"execution": {"address": "127.0.0.1:9"}})  # discard: no Ray there
    done = hpsearch_cli("run", str(path), timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        "error: execution.address: cannot connect to the Ray cluster at '127.0.0.1:9' "
        "(nothing accepts connections at 127.0.0.1:9"
    )
    assert "check the address" in lines[0]
    client = mlflow_client(project)
    experiment = client.get_experiment_by_name("test-study")
    assert experiment is not None
    [parent] = client.search_runs([experiment.experiment_id])
    assert parent.info.status == "FAILED"


def test_auto_on_a_cluster_that_has_stopped_is_one_line_where_ray_waited_for_ever(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    # What a `ray start --head` killed since (never `ray stop`ped) leaves behind.
    ray_dir = tmp_path / "raytmp" / "ray"
    ray_dir.mkdir(parents=True)
    (ray_dir / "ray_current_cluster").write_text("127.0.0.1:9")  # discard: nothing there
    path = write_config({"execution": {"address": "auto"}})
    env = {**os.environ, "RAY_TMPDIR": str(tmp_path / "raytmp")}
    env.pop("RAY_ADDRESS", None)
    done = hpsearch_cli("run", str(path), env=env, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: execution.address: auto finds the cluster at "), lines[0]
    assert f"({ray_dir / 'ray_current_cluster'}), and nothing accepts connections" in lines[0]
    assert lines[0].endswith(
        "it has stopped; start it again (ray start --head), or leave execution.address out "
        "for a Ray of the search's own"
    )
