"""Fused trials end to end: real Ray, Optuna and MLflow; each member an ordinary trial."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import hpsearch
from hpsearch import attrs
from hpsearch.config import load_config
from hpsearch.study import open_study
from hpsearch.workloads import digits
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
