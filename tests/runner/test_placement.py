"""Packing wired into real searches: a local Ray with logical GPUs, the simulated GPU backend,
real Optuna and MLflow. Each search starts its own Ray (as ``hpsearch run`` does)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import hpsearch
from hpsearch import attrs
from hpsearch.config import load_config
from hpsearch.study import open_study
from hpsearch.tracking import TRIAL_NUMBER_TAG
from tests.conftest import ConfigWriter, max_overlap, mlflow_client

pytestmark = pytest.mark.slow

STEP_S = 0.0036  # the simulated workload's step at batch 64, width 256, depth 1


def _config(
    *,
    util: float | list[float],
    memory: float | list[float],
    trials: int,
    seconds: float,
    gpus: int = 1,
) -> dict[str, Any]:
    """A search of trials that each put ``util`` % and ``memory`` MiB on their GPU."""
    epochs = 4
    return {
        "study": {"n_trials": trials, "sampler": {"type": "random", "seed": 3}},
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "train": "hpsearch.workloads.simulated_gpu:train",
        "space": {
            "x": None,  # the base config's entries, deleted
            "steps": None,
            "lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
            "utilization_pct": util,
            "memory_mb": memory,
            "batch_size": 64,
            "width": 256,
            "depth": 1,
            "epochs": epochs,
            "steps_per_epoch": round(seconds / epochs / STEP_S),
        },
        "execution": {"max_concurrent": None, "num_cpus": 8},
        "packing": {"probe_seconds": 1, "cooldown_seconds": 4},
        "telemetry": {
            "backend": "simulated",
            "interval_s": 0.25,
            "simulated": {"source": "load", "gpus": gpus},
        },
    }


def _per_gpu_overlap(study: Any) -> dict[int, int]:
    """The most trials that ran at once on each GPU (from the workers' own reports)."""
    spans: dict[int, list[tuple[float, float]]] = {}
    for trial in study.trials:
        gpu = trial.user_attrs[attrs.RESOURCES].get("gpu")
        if trial.datetime_start and trial.datetime_complete and gpu is not None:
            span = (trial.datetime_start.timestamp(), trial.datetime_complete.timestamp())
            spans.setdefault(gpu, []).append(span)
    return {gpu: max_overlap(s) for gpu, s in spans.items()}


def _decisions(project: Path, run_id: str) -> list[dict[str, Any]]:
    client = mlflow_client(project)
    path = client.download_artifacts(run_id, "packing_decisions.json", str(project))
    decisions: list[dict[str, Any]] = json.loads(Path(path).read_text())
    return decisions


def test_trials_that_leave_the_gpu_idle_are_packed_and_spread_over_two_gpus(
    write_config: ConfigWriter, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The seeds' RTX 4050 case: 11% utilisation, 167 MiB of 6 GiB per trial.
    path = write_config(_config(util=11, memory=167, trials=20, seconds=8, gpus=2))

    outcome = hpsearch.run(path)

    study = outcome.results.study
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 20
    printed = capsys.readouterr().out
    assert "packing gpu0: 1 trial(s) · no trial of this search measured yet" in printed
    assert "packing gpu1: 1 → 2 trial(s) · room: " in printed
    first, second = (t.user_attrs[attrs.RESOURCES] for t in study.trials[:2])
    assert {first["gpu"], second["gpu"]} == {0, 1}  # spread, not GPU 0 first
    assert first["gpus"] == 1.0  # unmeasured: alone
    overlap = _per_gpu_overlap(study)
    assert min(overlap.values()) >= 3, overlap
    shares = [t.user_attrs[attrs.RESOURCES]["gpus"] for t in study.trials]
    assert min(shares) <= 1 / 3  # later trials got smaller shares as counts rose
    assert any(t.user_attrs[attrs.RESOURCES]["co_tenants"] for t in study.trials)
    for trial in study.trials:  # the worker ran on the GPU the policy chose, not Ray's
        assert trial.user_attrs[attrs.ASSIGNED]["gpu_ids"] == [
            str(trial.user_attrs[attrs.RESOURCES]["gpu"])
        ]

    client = mlflow_client(project)
    assert outcome.mlflow_parent_run_id is not None
    allowed = client.get_metric_history(outcome.mlflow_parent_run_id, "packing_gpu0_trials_allowed")
    assert max(m.value for m in allowed) >= 3
    assert client.get_metric_history(outcome.mlflow_parent_run_id, "packing_gpu1_trials")
    decisions = _decisions(project, outcome.mlflow_parent_run_id)
    rises = [d for d in decisions if d["previous"] and d["limit"] > d["previous"]]
    assert rises
    assert all(d["reason"].startswith("room: ") for d in rises)
    run = client.search_runs(
        [client.get_experiment_by_name("test-study").experiment_id],  # type: ignore[union-attr]
        f"tags.`{TRIAL_NUMBER_TAG}` = '5'",
    )[0]
    assert run.data.tags["hpsearch.gpu"] in {"0", "1"}
    assert "hpsearch.co_tenants_at_start" in run.data.tags
    parent = client.get_run(outcome.mlflow_parent_run_id).data.tags
    assert parent["hpsearch.mps"] == "off (packing.mps)"
    assert parent["hpsearch.packing_mode"] == "auto"


@pytest.mark.parametrize(
    ("util", "memory", "why"),
    [(95, 800, "utilisation 85/95.0 → 1"), (20, 3500, "memory 5527/3500 MiB → 1")],
    ids=["saturating", "memory-heavy"],
)
def test_trials_that_fill_the_gpu_run_one_at_a_time(
    write_config: ConfigWriter, project: Path, util: float, memory: float, why: str
) -> None:
    path = write_config(_config(util=util, memory=memory, trials=5, seconds=3))

    outcome = hpsearch.run(path)

    study = outcome.results.study
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 5
    assert _per_gpu_overlap(study) == {0: 1}
    assert outcome.mlflow_parent_run_id is not None
    decisions = _decisions(project, outcome.mlflow_parent_run_id)
    assert {d["limit"] for d in decisions} == {1}
    reasons = [t.user_attrs[attrs.RESOURCES]["reason"] for t in study.trials[1:]]
    assert any(why in r for r in reasons), reasons


def test_an_oom_under_packing_lowers_the_count(write_config: ConfigWriter, project: Path) -> None:
    # Light trials pack; then a 4 GB one, admitted among them, gets a cap of a third
    # or half of 6141 MiB, runs out, is retried alone, and its GPU takes one fewer.
    path = write_config(_config(util=11, memory=[167, 4000], trials=12, seconds=6))
    study = open_study(load_config(path)).study
    for memory in [167] * 6 + [4000] + [167] * 3:
        study.enqueue_trial({"lr": 3e-3, "memory_mb": memory})

    outcome = hpsearch.run(path)

    study = outcome.results.study
    assert not [t for t in study.trials if t.state.name == "FAIL"]
    assert outcome.mlflow_parent_run_id is not None
    decisions = _decisions(project, outcome.mlflow_parent_run_id)
    lowered = [d for d in decisions if "ran out of memory" in d["reason"]]
    assert lowered, decisions
    assert all(d["limit"] < d["previous"] for d in lowered)
    heavy = study.trials[6]
    assert heavy.state.name == "PRUNED"
    assert heavy.user_attrs[attrs.OOM]["co_tenants"] >= 1
    retried = [t for t in study.trials if t.user_attrs.get(attrs.ALONE_RETRY_OF) == 6]
    assert [t.state.name for t in retried] == ["COMPLETE"]
    assert retried[0].user_attrs[attrs.RESOURCES]["gpus"] == 1.0


@pytest.fixture
def two_nodes(project: Path) -> Iterator[list[str]]:
    """A Ray cluster of two nodes on this machine, one logical GPU each; yields their ids."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "num_gpus": 1})
    cluster.add_node(num_cpus=4, num_gpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    try:
        yield [n["NodeID"] for n in ray.nodes() if n["Alive"]]  # type: ignore[no-untyped-call]
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]


def test_each_node_of_a_cluster_gets_its_own_decisions(
    write_config: ConfigWriter, project: Path, two_nodes: list[str]
) -> None:
    # The monitor reads the driver's node (the head): its GPU is packed; the other
    # node's GPU, which no monitor reads, holds one trial at a time.
    import ray

    head = ray.get_runtime_context().get_node_id()
    other = next(n for n in two_nodes if n != head)
    path = write_config(_config(util=11, memory=167, trials=12, seconds=6))

    outcome = hpsearch.run(path)

    study = outcome.results.study
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 12
    placed = {
        n: [t for t in study.trials if t.user_attrs[attrs.RESOURCES]["node_id"] == n]
        for n in (head, other)
    }
    assert placed[head]
    assert placed[other]
    for trial in study.trials:  # each ran on the node it was placed on
        assert (
            trial.user_attrs[attrs.ASSIGNED]["node_id"]
            == trial.user_attrs[attrs.RESOURCES]["node_id"]
        )
    assert outcome.mlflow_parent_run_id is not None
    decisions = _decisions(project, outcome.mlflow_parent_run_id)
    by_node = {n: [d for d in decisions if d["gpu"].startswith(n[:8])] for n in (head, other)}
    assert max(d["limit"] for d in by_node[head]) >= 2
    assert [d["limit"] for d in by_node[other]] == [1]
    assert "no telemetry reads this GPU" in by_node[other][0]["reason"]
