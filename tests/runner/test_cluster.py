"""The local Ray a search starts: loopback only, dashboard off, stopped afterwards."""

from __future__ import annotations

import io
from pathlib import Path

import psutil
import pytest
import ray
from ray._private import ray_constants
from rich.console import Console

import hpsearch
from hpsearch.config import ExecutionSpec
from hpsearch.runner._cluster import cluster_gpus, local_node_id, ray_cluster
from tests.conftest import ConfigWriter

# these tests start the Ray a search starts
pytestmark = [pytest.mark.process, pytest.mark.usefixtures("no_ray")]

LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}


def _listening(pids: set[int]) -> set[str]:
    return {
        conn.laddr.ip
        for conn in psutil.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN and conn.pid in pids and conn.laddr
    }


def test_local_ray_listens_on_loopback_only(project: Path) -> None:
    single_node_before = ray_constants.ENABLE_RAY_CLUSTER
    with ray_cluster(ExecutionSpec(num_cpus=1, num_gpus=2), str(project)) as capacity:
        assert (capacity.cpus, capacity.gpus) == (1.0, 2.0)
        me = psutil.Process()
        pids = {me.pid, *(child.pid for child in me.children(recursive=True))}
        addresses = _listening(pids)
        assert addresses, "Ray's servers should be listening"
        assert addresses <= LOOPBACK, addresses
        assert ray.util.get_node_ip_address() == "127.0.0.1"  # type: ignore[no-untyped-call]
        # Lean: no autoscaler monitor (one machine) and no log monitor (no log to driver).
        started = " ".join(" ".join(child.cmdline()) for child in me.children(recursive=True))
        assert "gcs_server" in started
        assert "autoscaler/_private/monitor.py" not in started
        assert "log_monitor.py" not in started
        # Nor the dashboard's head (Ray starts it with the dashboard off, for usage stats).
        assert "dashboard/dashboard.py" not in started
        assert "dashboard/agent.py" in started  # the raylet's agent, which it needs, stays
        # Nor the idle workers Ray starts for the first driver: the raylet was told.
        system = ray._private.state.state.get_system_config()  # type: ignore[no-untyped-call]
        assert system["prestart_worker_first_driver"] is False
    assert not ray.is_initialized()
    assert ray_constants.ENABLE_RAY_CLUSTER is single_node_before


def test_the_gpus_of_the_local_node_are_the_visible_ones_read_by_the_monitor(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This machine shows GPUs 2 and 3 to CUDA (and Ray); the monitor reads all four.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monitored: dict[int, float | None] = {0: 81559.0, 1: 81559.0, 2: 81559.0, 3: 40000.0}
    uuids = ("GPU-0a", "GPU-1b", "GPU-2c", "GPU-3d")  # a fake NVML's: no GPU here
    monkeypatch.setattr("hpsearch.telemetry._devices.local_gpu_uuids", lambda: uuids)
    with ray_cluster(ExecutionSpec(num_cpus=4, num_gpus=2), str(project)):
        nodes = cluster_gpus({"": monitored}, local_node_id())
        not_read = cluster_gpus({}, local_node_id())
        # The same two GPUs named by their UUIDs (whole, or their first characters), as
        # a scheduler or a user pins GPUs whatever order CUDA numbers them in.
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-3d,GPU-2")
        by_uuid = cluster_gpus({"": monitored}, local_node_id())
        # More visible than Ray's num_gpus takes: Ray has the first ones.
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3,0")
        first_two = cluster_gpus({"": monitored}, local_node_id())
        # Simulated GPUs (numbered 0 and 1) keep their numbers whatever it lists.
        simulated = cluster_gpus({"": {0: 6141.0, 1: 6141.0}}, local_node_id())
        # Nothing read (telemetry off): the trials still go to the GPUs it lists.
        unread = cluster_gpus({}, local_node_id())
        # MIG instances: no reading of a whole GPU is theirs.
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4f6e5a2b,MIG-7a1c3e5f")
        mig = cluster_gpus({"": monitored}, local_node_id())
        # Seen as another node (by a driver on none), read by that node's own monitor,
        # which shows the GPUs its Ray sees: GPUs 2 and 3, not the machine's first two.
        node = local_node_id() or ""
        remote = cluster_gpus({node: {2: 81559.0, 3: 40000.0}}, None)
    assert len(nodes) == 1
    assert nodes[0].node == "127.0.0.1"
    assert (nodes[0].gpus, nodes[0].cpus, nodes[0].monitored) == ((2, 3), 4.0, True)
    assert nodes[0].memory_mb == {2: 81559.0, 3: 40000.0}
    assert not not_read[0].monitored
    assert by_uuid[0].memory_mb == {2: 81559.0, 3: 40000.0}
    assert first_two[0].gpus == (2, 3)
    assert (simulated[0].gpus, simulated[0].monitored) == ((0, 1), True)
    assert (unread[0].gpus, unread[0].monitored) == ((2, 3), False)
    assert not mig[0].monitored
    assert (remote[0].gpus, remote[0].monitored) == ((2, 3), True)


@pytest.mark.usefixtures("nvml_missing")  # whatever this machine has: no GPU is read
def test_a_trial_ray_gives_a_mig_instance_keeps_it(
    write_config: ConfigWriter, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ray's GPUs are the MIG instances CUDA_VISIBLE_DEVICES names (logical ones here). The
    # policy numbers whole GPUs: pointed at "0" or "1", a trial ran on another slice.
    instances = [
        "MIG-4f6e5a2b-9c1d-5e3f-8a7b-6c5d4e3f2a1b",
        "MIG-7a1c3e5f-2b4d-4f6a-8c0e-1d3f5a7b9c2e",
    ]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(instances))
    seen = project / "seen"
    seen.mkdir()
    path = write_config(
        {
            "train": "tests.train_functions:writes_its_gpu",
            "study": {"n_trials": 10, "sampler": {"type": "grid"}},
            "space": {"x": [0, 1], "seen": str(seen)},
            "execution": {"num_gpus": 2, "max_concurrent": 2},
            "packing": {"mode": "fixed", "trials_per_gpu": 1},
        }
    )
    console = Console(file=io.StringIO(), width=200)
    hpsearch.run(path, console=console)
    assert sorted(f.read_text() for f in seen.iterdir()) == instances
    # Unread, Ray's GPUs still run the trials: the search does not say they run on CPU.
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert "; trials run on the 2 GPU(s) Ray has, unread\n" in output
