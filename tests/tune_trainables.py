"""Ray Tune trainables as Ray's users write them (no hpsearch import), for the tests."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from ray import train, tune
from ray.train import Checkpoint


def with_data(config: dict[str, Any], data: dict[str, float]) -> None:
    """A trainable whose data ``tune.with_parameters`` puts in Ray's object store."""
    tune.report({"score": config["x"] * data["k"]})


trainable = tune.with_parameters(with_data, data={"k": 2.0})


def before_train_v2(config: dict[str, Any]) -> None:
    """As Ray's docs wrote one before Train V2: ``ray.train``'s report, checkpoint and context."""
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            start = json.loads((Path(folder) / "state.json").read_text())["step"] + 1
    named = len(train.get_context().get_trial_name()) > 0
    for step in range(start, 3):
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "state.json").write_text(json.dumps({"step": step}))
            train.report(
                {"score": config["x"] * (step + 1), "named": float(named)},
                checkpoint=Checkpoint.from_directory(folder),
            )


def resourceful(config: dict[str, Any]) -> None:
    """A trainable that asks Tune for its resources, as its script would give them."""
    tune.report({"score": config["x"]})


asks_resources = tune.with_resources(resourceful, {"cpu": 2, "gpu": 1})


def one_cpu(config: dict[str, Any]) -> None:
    """A trainable that asks for what every trial gets anyway: one CPU."""
    tune.report({"score": config["x"]})


asks_one_cpu = tune.with_resources(one_cpu, {"cpu": 1})


def logs_with_setup_mlflow(config: dict[str, Any]) -> None:
    """As Ray's MLflow guide writes one: ``setup_mlflow`` with the experiment its driver's
    script made (``config["experiment"]``), or with none (the Ray trial's, Ray's default)."""
    from ray.air.integrations.mlflow import setup_mlflow

    named = {"experiment_name": config["experiment"]} if config["experiment"] else {}
    mlflow = setup_mlflow(config, **named)
    mlflow.log_metric("own_loss", config["x"])
    tune.report({"score": config["x"]})
