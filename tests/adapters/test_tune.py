"""A Ray Tune function trainable, unchanged: its reports and checkpoints through hpsearch's."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from ray import tune
from ray.tune import Checkpoint

from hpsearch import TrialContext, TrialPruned
from hpsearch.adapters import nested, tune_train


def trainable(config: dict[str, Any]) -> None:
    """As Ray's docs write one: resume from the checkpoint, report one with each epoch."""
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            start = json.loads((Path(folder) / "state.json").read_text())["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "state.json").write_text(json.dumps({"epoch": epoch}))
            score = config["model"]["scale"] * (epoch + 1)
            tune.report(
                {"score": score, "note": "text"}, checkpoint=Checkpoint.from_directory(folder)
            )


def test_reports_and_checkpoints_go_through_the_trials_and_a_rerun_resumes(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    first = TrialContext.local(checkpoint_dir=str(folder))
    tune_train(trainable)({"epochs": 2, "model.scale": 0.5}, first)

    assert [(r.step, r.metrics) for r in first.history] == [
        (0, {"score": 0.5}),
        (1, {"score": 1.0}),
    ]
    assert json.loads((folder / "state.json").read_text()) == {"epoch": 1}  # the last one, whole

    again = TrialContext.local(checkpoint_dir=str(folder))
    tune_train(trainable)({"epochs": 4, "model.scale": 0.5}, again)
    # tune.get_checkpoint() gave the trial's folder back: it went on from epoch 2.
    assert [r.metrics["score"] for r in again.history] == [1.5, 2.0]


def test_the_pruners_verdict_stops_the_trainable_at_its_report(tmp_path: Path) -> None:
    ctx = TrialContext.local(checkpoint_dir=str(tmp_path), prune_at=1)
    with pytest.raises(TrialPruned, match="pruned after report 2"):
        tune_train(trainable)({"epochs": 5, "model.scale": 1.0}, ctx)
    assert [r.step for r in ctx.history] == [0, 1]


def test_dotted_names_are_the_nested_config_a_param_space_gives() -> None:
    assert nested({"lr": 0.1, "model.width": 64, "model.act.name": "relu"}) == {
        "lr": 0.1,
        "model": {"width": 64, "act": {"name": "relu"}},
    }


def test_a_returned_dict_is_the_final_result_its_numbers_the_metrics(tmp_path: Path) -> None:
    def old_style(config: dict[str, Any]) -> dict[str, Any]:
        return {"score": config["x"] * 2, "note": "not a metric"}

    ctx = TrialContext.local(checkpoint_dir=str(tmp_path))
    assert tune_train(old_style)({"x": 1.5}, ctx) == {"score": 3.0}
