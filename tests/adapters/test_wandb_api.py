"""A W&B sweep's training script runs as it is, as a command trial: W&B's run API is
hpsearch's."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch import TrialContext
from hpsearch.adapters import CommandFailed
from tests.adapters.trial_scripts import run_script

pytestmark = pytest.mark.process  # each test runs a script

# W&B's own sweep walkthrough's script (docs.wandb.ai, "Tune hyperparameters"), less its
# random numbers: its parameters from wandb.config, a wandb.log per epoch.
WALKTHROUGH = """
import numpy as np
import wandb


def main():
    run = wandb.init()
    lr = wandb.config.lr
    bs = wandb.config.batch_size
    epochs = wandb.config.epochs
    for epoch in np.arange(1, epochs):
        val_acc = np.float32(lr * epoch)
        wandb.log({"epoch": epoch, "val_acc": val_acc, "val_loss": 1 / epoch, "bs": bs})
    print("run", run.id, run.sweep_id, wandb.run is run)


main()
"""

# The other way W&B's examples write one: defaults given to init, a with block, the
# run's own log, media and text logged beside numbers, and the summary set by hand.
WITH_DEFAULTS = """
import argparse

import torch
import wandb

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.5)
parser.add_argument("--layers", type=int, default=2)
args, _ = parser.parse_known_args()

with wandb.init(project="mnist", config=args) as run:
    config = run.config
    config.update({"lr": 123.0, "width": 64})  # a sweep's parameter stays as the sweep set it
    wandb.define_metric("acc", summary="max")
    wandb.define_metric("loss", summary="min,mean")
    table = wandb.Table(columns=["a"])
    table.add_data(1)
    for step, acc in enumerate([0.5, 0.9, 0.7]):
        run.log({"acc": acc, "loss": 1 - acc, "note": "text", "table": table}, step=step * 10)
        run.log({"extra": step}, commit=False)
    run.log({"nested": {"a": 1}, "tensor": torch.tensor(0.25), "tensors": torch.ones(2)})
    run.summary["best_layers"] = config.layers
    print("config", dict(config))
"""


@pytest.mark.parametrize("metrics", ["stdout-jsonl", "file-jsonl"])
def test_a_sweeps_script_gets_its_parameters_and_each_log_is_a_report(
    tmp_path: Path, metrics: str, capfd: pytest.CaptureFixture[str]
) -> None:
    ctx = TrialContext.local(trial_number=3)
    params = {"lr": 0.1, "batch_size": 32, "epochs": 4}
    final = run_script(tmp_path, WALKTHROUGH, params, ctx, metrics=metrics)
    # One report a wandb.log, at W&B's steps 0, 1, 2. The last holds what the summary
    # keeps (each metric's last value, where a sweep reads its metric): nothing is added.
    assert [r.step for r in ctx.history] == [0, 1, 2]
    assert [r.metrics["val_acc"] for r in ctx.history] == pytest.approx([0.1, 0.2, 0.3])
    assert ctx.history[-1].metrics == {
        "epoch": 3,
        "val_acc": pytest.approx(0.3),
        "val_loss": pytest.approx(1 / 3),
        "bs": 32,
    }
    assert final is None
    assert "run 3 my-study True" in capfd.readouterr().out


def test_defaults_steps_summaries_and_media_behave_as_under_wandb(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    ctx = TrialContext.local(trial_number=3)
    final = run_script(tmp_path, WITH_DEFAULTS, {"lr": 0.01}, ctx)
    said = capfd.readouterr()
    # The sweep's lr over the script's default; its other defaults and updates kept.
    assert "config {'lr': 0.01, 'layers': 2, 'width': 64}" in said.out
    assert "Config item 'lr' was locked by 'sweep' (ignored update)" in said.err
    # step= logs at that step, uncommitted until a later step (commit=False's extra joins
    # it); the last log, given no step, joins step 20 and commits it, as W&B's does.
    assert [r.step for r in ctx.history] == [0, 10, 20]
    assert [r.metrics.get("extra") for r in ctx.history] == [0, 1, 2]
    assert ctx.history[-1].metrics["nested.a"] == 1
    # A one-element tensor is its number (W&B logs it so); a larger one is not a metric.
    assert ctx.history[-1].metrics["tensor"] == 0.25
    assert "tensors" not in ctx.history[-1].metrics
    assert all("note" not in r.metrics and "table" not in r.metrics for r in ctx.history)
    # define_metric's summaries under W&B's names, in the last value's place.
    assert final["acc.max"] == pytest.approx(0.9)
    assert final["loss.min"] == pytest.approx(0.1)
    assert final["loss.mean"] == pytest.approx(0.3)
    assert "acc" not in final
    assert "loss" not in final
    assert final["best_layers"] == 2


def test_logging_before_init_fails_the_trial_as_wandb_does(tmp_path: Path) -> None:
    with pytest.raises(CommandFailed, match=r"You must call wandb.init\(\) before wandb.log\(\)"):
        run_script(tmp_path, "import wandb\nwandb.log({'x': 1})\n", {}, TrialContext.local())
    with pytest.raises(CommandFailed, match=r"wandb.Artifact: hpsearch answers W&B's run API"):
        run_script(
            tmp_path,
            "import wandb\nwandb.init()\nwandb.Artifact('data', 'dataset')\n",
            {},
            TrialContext.local(),
        )


def test_only_the_named_groups_are_nested_and_a_group_that_is_a_parameter_stays_flat(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # W&B's Hydra example searches optimizer and optimizer.config.learning_rate side by
    # side; a sweep's nested group (model) is named by the converted train.env.
    script = "import wandb\nwandb.init()\nprint('config', dict(wandb.config))\n"
    params = {"optimizer": "sgd", "optimizer.config.lr": 0.1, "model.depth": 2, "seed.x": 1}
    env = {"HPSEARCH_WANDB_NESTED": "model,optimizer"}
    run_script(tmp_path, script, params, TrialContext.local(), env=env)
    assert (
        "config {'optimizer': 'sgd', 'optimizer.config.lr': 0.1, 'model': {'depth': 2}, "
        "'seed.x': 1}" in capfd.readouterr().out
    )
