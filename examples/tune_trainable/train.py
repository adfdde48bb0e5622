"""A Ray Tune function trainable and its param_space, as Ray Tune's examples write them.

It knows nothing of hpsearch. Run by Ray Tune::

    python examples/tune_trainable/train.py

or by hpsearch, unchanged (examples/tune_trainable/config.yaml: ``train: {tune: ...}``,
``space: examples.tune_trainable.train:param_space``).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import torch
from ray import tune
from ray.tune import Checkpoint
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

param_space = {
    "lr": tune.loguniform(1e-3, 1e-1),
    "momentum": tune.uniform(0.0, 0.95),
    "model": {"width": tune.choice([32, 64, 128])},
    "epochs": 4,
}


def train_fn(config: dict[str, Any]) -> None:
    """An MLP on scikit-learn's digits; reports and checkpoints each epoch, resumes."""
    torch.manual_seed(0)
    features, labels = load_digits(return_X_y=True)
    x_train, x_valid, y_train, y_valid = train_test_split(
        features / 16.0, labels, test_size=0.25, stratify=labels, random_state=0
    )
    x_train, x_valid = (torch.tensor(x, dtype=torch.float32) for x in (x_train, x_valid))
    y_train, y_valid = torch.tensor(y_train), torch.tensor(y_valid)
    width = config["model"]["width"]
    model = nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"])
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            state = torch.load(Path(folder) / "state.pt", weights_only=False)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start = json.loads((Path(folder) / "epoch.json").read_text())["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        model.train()
        for first in range(0, len(x_train), 32):
            optimizer.zero_grad()
            out = model(x_train[first : first + 32])
            nn.functional.cross_entropy(out, y_train[first : first + 32]).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            accuracy = (model(x_valid).argmax(dim=1) == y_valid).float().mean().item()
        with tempfile.TemporaryDirectory() as folder:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save(state, Path(folder) / "state.pt")
            (Path(folder) / "epoch.json").write_text(json.dumps({"epoch": epoch}))
            tune.report(
                {"val_accuracy": accuracy, "epoch": epoch, "resumed_at": start},
                checkpoint=Checkpoint.from_directory(folder),
            )


if __name__ == "__main__":
    tuner = tune.Tuner(
        train_fn,
        param_space=param_space,
        tune_config=tune.TuneConfig(metric="val_accuracy", mode="max", num_samples=4),
    )
    print(tuner.fit().get_best_result().config)
