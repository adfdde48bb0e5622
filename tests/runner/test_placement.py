"""Placement through Ray: a trial pinned to the GPU and node the packing policy chose runs there.

Real Ray with logical GPUs, the simulated GPU backend, real Optuna and MLflow;
each search starts its own Ray (as ``hpsearch run`` does). How packing decides
(rises, saturation, memory, OOMs) is shown in simulated time in
``test_simulated.py``; these tests are about Ray carrying the decisions out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import hpsearch
from hpsearch import attrs
from tests.conftest import ConfigWriter, load_search, mlflow_client

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("seeded_store")]


def _decisions(project: Path, run_id: str) -> list[dict[str, Any]]:
    client = mlflow_client(project)
    path = client.download_artifacts(run_id, "packing_decisions.json", str(project))
    decisions: list[dict[str, Any]] = json.loads(Path(path).read_text())
    return decisions


@pytest.fixture
def two_nodes(project: Path) -> Iterator[list[str]]:
    """A Ray cluster of two nodes on this machine, two logical GPUs each; yields their ids."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "num_gpus": 2})
    cluster.add_node(num_cpus=4, num_gpus=2)
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    try:
        yield [n["NodeID"] for n in ray.nodes() if n["Alive"]]  # type: ignore[no-untyped-call]
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]


def test_each_trial_runs_on_the_node_and_gpu_the_policy_chose(
    write_config: ConfigWriter, project: Path, two_nodes: list[str]
) -> None:
    # The monitor reads the driver's node (the head): its GPUs are packed; the other
    # node's GPUs, which no monitor reads, hold one trial at a time.
    import ray

    head = ray.get_runtime_context().get_node_id()
    other = next(n for n in two_nodes if n != head)
    path = write_config(load_search(util=11, memory=167, trials=10, seconds=2.5, gpus=2))

    outcome = hpsearch.run(path)

    study = outcome.results.study
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 10
    where = [
        (t.user_attrs[attrs.RESOURCES]["node_id"], t.user_attrs[attrs.RESOURCES]["gpu"])
        for t in study.trials
    ]
    assert len(set(where[:4])) == 4  # the first four spread over the four GPUs
    assert {node for node, _ in where} == {head, other}
    for trial in study.trials:  # each ran where it was placed: its node, and its GPU, not Ray's
        resources, assigned = trial.user_attrs[attrs.RESOURCES], trial.user_attrs[attrs.ASSIGNED]
        assert assigned["node_id"] == resources["node_id"]
        assert assigned["gpu_ids"] == [str(resources["gpu"])]
    assert outcome.mlflow_parent_run_id is not None
    decisions = _decisions(project, outcome.mlflow_parent_run_id)
    by_node = {n: [d for d in decisions if d["gpu"].startswith(n[:8])] for n in (head, other)}
    assert max(d["limit"] for d in by_node[head]) >= 2
    assert [d["limit"] for d in by_node[other]] == [1, 1]  # one decision per GPU, never raised
    assert "no telemetry reads this GPU" in by_node[other][0]["reason"]
