"""Fused trials end to end: real Ray, Optuna and MLflow; each member an ordinary trial."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import hpsearch
from hpsearch import attrs
from hpsearch.config import load_config
from hpsearch.study import open_study
from hpsearch.workloads import digits, simulated_gpu
from tests.conftest import cli, mlflow_client

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("ray_one_gpu", "seeded_store")]

CONFIG: dict[str, Any] = {
    "study": {"name": "fused", "n_trials": 6, "sampler": {"type": "tpe", "seed": 3}},
    "objective": {"metric": "val_accuracy", "direction": "maximize"},
    "train": "hpsearch.workloads.digits:train",
    "space": {
        "epochs": 2,
        "depth": 1,
        "width": [16, 32],
        "batch_size": [64, 128],
        "lr": {"type": "float", "low": 1e-3, "high": 3e-2, "log": True},
        "dropout": {"type": "float", "low": 0.0, "high": 0.3},
    },
    "execution": {"max_concurrent": 1},
    "fusion": {"mode": "fixed", "members": 4, "train": "hpsearch.workloads.digits:train_members"},
}


def test_a_fused_search_runs_each_member_as_the_trial_it_would_be_alone(project: Path) -> None:
    path = project / "fused.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    outcome = hpsearch.run(path)
    assert outcome.finished == 6

    trials = open_study(load_config(path)).study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 6
    groups = {t.number: t.user_attrs[attrs.FUSED_GROUP] for t in trials}
    # Groups of 4, the last cut to what the budget had left.
    assert groups == {n: {"group": 0, "members": 4} for n in range(4)} | {
        n: {"group": 4, "members": 2} for n in (4, 5)
    }
    for group in ([0, 1, 2, 3], [4, 5]):
        shapes = {(trials[n].params["width"], trials[n].params["batch_size"]) for n in group}
        assert len(shapes) == 1  # shared: asked with the first member's fixed
        assert len({trials[n].params["lr"] for n in group}) == len(group)  # varied

    # A member's result is its configuration's, as trained alone with its seed.
    last = trials[5]
    alone = hpsearch.TrialContext.local(trial_number=5, seed=last.user_attrs[attrs.SEED])
    digits.train({**CONFIG["space"], **last.params}, alone)
    assert last.values == pytest.approx([alone.history[-1].metrics["val_accuracy"]], rel=1e-6)

    # Its own MLflow child run, tagged with its group; `trials` lists it with its group.
    experiment = mlflow_client(project).get_experiment_by_name("fused")
    assert experiment is not None
    runs = mlflow_client(project).search_runs([experiment.experiment_id])
    tagged = {
        r.data.tags["optuna.trial_number"]: r.data.tags.get("hpsearch.fused_group")
        for r in runs
        if "optuna.trial_number" in r.data.tags
    }
    assert tagged == {"0": "0", "1": "0", "2": "0", "3": "0", "4": "4", "5": "4"}
    listed = cli("trials", str(path))
    assert listed.returncode == 0, listed.stderr
    assert "group" in listed.stdout.splitlines()[2]
    best = cli("best", str(path), "--json")
    assert '"fused_group"' in best.stdout


def test_fusion_is_checked_before_anything_runs(project: Path) -> None:
    path = project / "fused.yaml"
    config = {**CONFIG, "fusion": {**CONFIG["fusion"], "train": "hpsearch.workloads.digits:train"}}
    path.write_text(yaml.safe_dump(config))
    done = cli("validate", str(path))
    assert done.returncode == 2
    assert "fusion.train" in done.stderr
    assert "cannot be called as train(members)" in done.stderr
    config = {**CONFIG, "fusion": {**CONFIG["fusion"], "shared": ["width", "hidden"]}}
    path.write_text(yaml.safe_dump(config))
    done = cli("validate", str(path))
    assert done.returncode == 2
    assert "fusion.shared: ['hidden'] are not parameters of the space" in done.stderr


SIMULATED: dict[str, Any] = {
    "study": {"name": "front", "n_trials": 8, "sampler": {"type": "random", "seed": 5}},
    "objectives": [
        {"metric": "val_accuracy", "direction": "maximize"},
        {"metric": "samples_per_sec", "direction": "maximize"},
    ],
    "train": "hpsearch.workloads.simulated_gpu:train",
    "space": {
        "width": [64, 512],
        "batch_size": [32, 256],
        "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
        "epochs": 2,
        "steps_per_epoch": 5,
        "time_scale": 0.2,
    },
    "telemetry": {"backend": "simulated"},
    "packing": {"mode": "off"},
    "execution": {"max_concurrent": 1},
}


def _front(values: dict[tuple[Any, ...], tuple[float, float]]) -> set[tuple[Any, ...]]:
    """Trials no other beats in accuracy and in speed by more than the noise of a timing (5%)."""

    def beats(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return a[0] >= b[0] and a[1] >= 0.95 * b[1] and (a[0] > b[0] or a[1] > 1.05 * b[1])

    return {k for k, v in values.items() if not any(beats(w, v) for w in values.values())}


def test_a_fused_searchs_front_is_the_one_the_same_trials_make_unfused(project: Path) -> None:
    fused = {
        **SIMULATED,
        "fusion": {
            "mode": "fixed",
            "members": 4,
            "train": "hpsearch.workloads.simulated_gpu:train_members",
        },
    }
    path = project / "fused.yaml"
    path.write_text(yaml.safe_dump(fused))
    hpsearch.run(path)
    fused_trials = open_study(load_config(path)).study.get_trials()
    assert {t.user_attrs[attrs.FUSED_GROUP]["members"] for t in fused_trials} == {4}

    # The same trials, one per worker.
    alone = project / "alone.yaml"
    alone.write_text(
        yaml.safe_dump({**SIMULATED, "study": {**SIMULATED["study"], "name": "alone"}})
    )
    queued = open_study(load_config(alone)).study
    for trial in fused_trials:
        queued.enqueue_trial(trial.params)
    hpsearch.run(alone)
    alone_trials = open_study(load_config(alone)).study.get_trials()

    def by_params(trials: list[Any]) -> dict[tuple[Any, ...], tuple[float, float]]:
        return {tuple(sorted(t.params.items())): (t.values[0], t.values[1]) for t in trials}

    fused_values, alone_values = by_params(fused_trials), by_params(alone_trials)
    assert set(fused_values) == set(alone_values)
    # A member's speed objective is its configuration's alone (the solo twin), not its
    # share of the group's: a fused member measured a fraction of it.
    for key, (accuracy, speed) in fused_values.items():
        assert accuracy == alone_values[key][0]
        assert speed == pytest.approx(alone_values[key][1], rel=0.05)
    assert _front(fused_values) == _front(alone_values)
    for trial in fused_trials:
        # Exactly the model's solo figure for the configuration; what the member measured,
        # its share of the group's, is less.
        solo = simulated_gpu.plan({**SIMULATED["space"], **trial.params}).epochs[-1]
        assert trial.values[1] == pytest.approx(solo.metrics["samples_per_sec"], rel=1e-9)
        assert trial.user_attrs[attrs.METRICS]["samples_per_sec"] < trial.values[1]


@pytest.mark.parametrize(
    ("utilization", "settled"),
    [(10.0, 4), (100.0, 1)],
    ids=["idle-gpu-grows", "busy-gpu-declines"],
)
def test_auto_fusion_measures_each_doubling_and_keeps_what_pays(
    project: Path, utilization: float, settled: int
) -> None:
    # Busy: kernels on every SM all the time (a GPU busy 100% on a few SMs still gains).
    config = {
        **SIMULATED,
        "study": {"name": "auto", "n_trials": 10, "sampler": {"type": "random", "seed": 1}},
        "space": {
            **SIMULATED["space"],
            "width": 64,
            "utilization_pct": utilization,
            "sm_share": 1.0 if utilization == 100.0 else None,
        },
        "fusion": {
            "mode": "auto",
            "max_members": 4,
            "train": "hpsearch.workloads.simulated_gpu:train_members",
        },
    }
    path = project / "auto.yaml"
    path.write_text(yaml.safe_dump(config))
    outcome = hpsearch.run(path)
    trials = open_study(load_config(path)).study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 10
    groups: dict[int, int] = {}
    for trial in trials:
        group = trial.user_attrs.get(attrs.FUSED_GROUP, {"group": trial.number, "members": 1})
        groups[group["group"]] = group["members"]
    sizes = list(groups.values())
    # Groups start at 2; a group launched before the last one's measure came keeps its size.
    assert sizes[0] == 2
    if settled == 1:
        assert sizes[-1] == 1
        assert 4 not in sizes
    else:
        assert 4 in sizes
        assert 1 not in sizes
    # Each decision, with its reason, on the parent run.
    decisions = _fusion_decisions(project, outcome)
    assert decisions[-1]["members"] == settled
    assert decisions[-1]["reason"].startswith("settled")


def test_a_group_out_of_memory_is_split_and_its_shape_capped(project: Path) -> None:
    # One member holds 900 MiB beyond the 500 MiB context: 4 need 4100 of 3000, 2 fit.
    config = {
        **SIMULATED,
        "study": {"name": "split", "n_trials": 6, "sampler": {"type": "random", "seed": 2}},
        "space": {**SIMULATED["space"], "width": 64, "batch_size": 32, "memory_mb": 1400},
        "telemetry": {"backend": "simulated", "simulated": {"memory_total_mb": 3000}},
        "fusion": {
            "mode": "fixed",
            "members": 4,
            "train": "hpsearch.workloads.simulated_gpu:train_members",
        },
    }
    path = project / "split.yaml"
    path.write_text(yaml.safe_dump(config))
    outcome = hpsearch.run(path)
    trials = open_study(load_config(path)).study.get_trials()
    # Split in the worker, the first group's members all complete, uncharged.
    assert [t.state.name for t in trials] == ["COMPLETE"] * 6
    assert [t.user_attrs[attrs.FUSED_GROUP]["members"] for t in trials] == [4] * 4 + [2] * 2
    assert not any(attrs.OOM in t.user_attrs for t in trials)
    [decision] = _fusion_decisions(project, outcome)
    assert decision["members"] == 2
    assert decision["reason"] == "a group of 4 ran out of memory: at most 2"


def _fusion_decisions(project: Path, outcome: hpsearch.RunOutcome) -> list[dict[str, Any]]:
    """The fusion decisions in the ``packing_decisions.json`` of the search's parent run."""
    assert outcome.mlflow_parent_run_id is not None
    text = mlflow_client(project).download_artifacts(
        outcome.mlflow_parent_run_id, "packing_decisions.json", str(project)
    )
    decisions: list[dict[str, Any]] = json.loads(Path(text).read_text())
    return [d for d in decisions if d.pop("decides") == "members"]
