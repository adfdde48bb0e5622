"""A search on two nodes started with ``ray start``: every node's GPUs are read and packed."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest

from hpsearch import attrs
from tests.cluster.conftest import RayNodes, ray_node_env
from tests.conftest import ConfigWriter, load_search, mlflow_client, wait_for
from tests.faults.conftest import Drivers, study_trials

pytestmark = pytest.mark.process

# Enough for the second node to be measured and packed while trials are still
# launched: under a loaded CI its first trials took 13 s each, and with 12 trials
# the first node (the driver's own monitor, measured first) had launched them all.
N_TRIALS = 24


@pytest.fixture
def two_gpu_nodes() -> Iterator[RayNodes]:
    """A head and a second node, each of 4 CPUs and 2 (logical, simulated) GPUs."""
    cluster = RayNodes(ray_node_env())
    cluster.head("--num-cpus=4", "--num-gpus=2")
    cluster.worker("--num-cpus=4", "--num-gpus=2")
    try:
        yield cluster
    finally:
        cluster.kill_all()


def _resources(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    resources: dict[str, Any] = trial.user_attrs.get(attrs.RESOURCES, {})
    return resources


def _node(trial: optuna.trial.FrozenTrial) -> str:
    return str(_resources(trial)["node_id"])


def test_both_nodes_gpus_pack_and_a_lost_node_monitor_falls_back_to_one_trial(
    write_config: ConfigWriter, project: Path, two_gpu_nodes: RayNodes, drivers: Drivers
) -> None:
    search = load_search(util=11, memory=167, trials=N_TRIALS, seconds=3.0, gpus=2)
    address = f"127.0.0.1:{two_gpu_nodes.port}"
    search["execution"] = {"address": address, "max_concurrent": 8}
    # A GPU holds 2 at most and a node has 2: the 8 running trials need both nodes.
    # (With more allowed on one GPU, the first node measured could take every trial, and the
    # other node's GPU never shared: a flake on a loaded machine.)
    search["packing"]["max_trials_per_gpu"] = 2
    path = write_config(search)
    driver = drivers.start(path, env=two_gpu_nodes.env)

    def packed_on_both_nodes() -> bool:
        assert driver.poll() is None, "the driver ended before its trials packed on both nodes"
        trials = study_trials()
        shared = [t for t in trials if _resources(t).get("co_tenants")]
        # And a trial of each node has ended with its series: a lost monitor's node
        # keeps what it measured before, not the series of trials still running there.
        measured = [t for t in trials if t.state.name == "COMPLETE" and attrs.GPU in t.user_attrs]
        return len({_node(t) for t in shared}) == 2 == len({_node(t) for t in measured})

    try:
        wait_for(packed_on_both_nodes, 240, "trials sharing a GPU on each node")
    except AssertionError:  # say what the search had done, and what its driver said
        seen = [
            (_node(t)[:8], t.state.name, _resources(t).get("co_tenants"))
            for t in study_trials()
            if attrs.RESOURCES in t.user_attrs
        ]
        driver.kill()
        stdout, stderr = driver.communicate()
        raise AssertionError(
            f"no sharing on both nodes: {seen}\n{stdout[-2000:]}\n{stderr[-3000:]}"
        ) from None
    # The monitor of the node the driver does not run on is an actor there: kill it.
    subprocess.run(["pkill", "-9", "-f", "NodeMonitorActor"], check=True)
    stdout, stderr = driver.communicate(timeout=180)

    assert driver.returncode == 0, stderr[-3000:]
    trials = study_trials(while_running=False)
    assert [t.state.name for t in trials] == ["COMPLETE"] * N_TRIALS
    nodes = {_node(t) for t in trials}
    assert len(nodes) == 2
    for trial in trials:  # each ran where it was placed: its node, and its GPU, not Ray's
        assigned = trial.user_attrs[attrs.ASSIGNED]
        assert assigned["node_id"] == _node(trial)
        assert assigned["gpu_ids"] == [str(_resources(trial)["gpu"])]
    # Each trial's GPU series came from its own node's monitor (no "not sampled").
    sampled = {_node(t) for t in trials if attrs.GPU in t.user_attrs}
    assert sampled == nodes
    lost = [line for line in stdout.splitlines() if "GPU monitor of node" in line]
    assert len(lost) == 1, stdout[-3000:]
    assert "its GPUs run one trial each from now on" in lost[0]

    client = mlflow_client(project)
    experiment = client.get_experiment_by_name("test-study")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    saved = client.download_artifacts(parent.info.run_id, "packing_decisions.json", str(project))
    decisions = _decisions(saved)
    by_node = {n: [d for d in decisions if d["gpu"].startswith(n[:8])] for n in nodes}
    for node, made in by_node.items():
        assert max(d["limit"] for d in made) >= 2, (node, made)
    # The lost monitor's node ends on one trial per GPU, and says why.
    ends = {n: {d["gpu"]: d for d in made} for n, made in by_node.items()}
    fell_back = [
        n
        for n, last in ends.items()
        if all(d["limit"] == 1 and "no GPU monitor" in d["reason"] for d in last.values())
    ]
    assert len(fell_back) == 1, ends  # each GPU's last decision, to tell why it did not


def _decisions(path: str) -> list[dict[str, Any]]:
    """The parent run's ``packing_decisions.json``: every first or changed limit."""
    decisions: list[dict[str, Any]] = json.loads(Path(path).read_text())
    return decisions
