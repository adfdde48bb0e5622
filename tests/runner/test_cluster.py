"""The local Ray a search starts: loopback only, dashboard off, stopped afterwards."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
import ray
from ray._private import ray_constants

from hpsearch.config import ExecutionSpec
from hpsearch.runner.cluster import ray_cluster

pytestmark = pytest.mark.slow

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
    assert not ray.is_initialized()
    assert ray_constants.ENABLE_RAY_CLUSTER is single_node_before
