"""``hpsearch convert``, then ``hpsearch run``: a W&B sweep's script searched as the sweep said."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from hpsearch import attrs
from tests.conftest import cli, mlflow_client

# A sweep's script as W&B users write one: argparse flags from ${args}, its metric by
# wandb.log (W&B's run API is hpsearch's in a command trial: nothing goes to W&B).
SCRIPT = """\
import argparse

import wandb

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float)
parser.add_argument("--optimizer")
parser.add_argument("--epochs", type=int)
args = parser.parse_args()
wandb.init(project="sweep-demo", config=args)
for epoch in range(args.epochs):
    loss = abs(args.lr - 0.01) + (0.1 if args.optimizer == "sgd" else 0.0) + 1.0 / (epoch + 1)
    wandb.log({"epoch": epoch, "val_loss": loss})
"""

SWEEP = """\
program: train.py
method: random
metric: {name: val_loss, goal: minimize}
parameters:
  lr: {min: 0.001, max: 0.1, distribution: log_uniform_values}
  optimizer: {values: [adam, sgd]}
  epochs: {value: 3}
run_cap: 3
"""


@pytest.mark.process
@pytest.mark.usefixtures("ray_one_gpu", "seeded_store")
def test_a_converted_sweep_runs_its_script_with_the_sweeps_parameters(project: Path) -> None:
    (project / "train.py").write_text(SCRIPT)
    (project / "sweep.yaml").write_text(SWEEP)

    made = cli("convert", "sweep.yaml", "-o", "hpsearch.yaml")
    assert made.returncode == 0, made.stderr
    assert "wrote hpsearch.yaml (a W&B sweep)" in made.stderr
    again = cli("convert", "sweep.yaml", "-o", "hpsearch.yaml")  # nothing written is lost
    assert again.returncode == 2
    assert again.stderr.strip() == (
        "error: hpsearch.yaml: already exists; choose another --output, or remove it"
    )

    done = cli("run", "hpsearch.yaml")
    assert done.returncode == 0, done.stderr[-3000:]
    study = optuna.load_study(study_name="sweep", storage="sqlite:///mlruns/optuna.db")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    client = mlflow_client(project)
    for trial in study.trials:
        assert set(trial.params) == {"lr", "optimizer"}
        # The script got the trial's values through {args}: its last loss is theirs.
        expected = (
            abs(trial.params["lr"] - 0.01)
            + (0.1 if trial.params["optimizer"] == "sgd" else 0)
            + 1 / 3
        )
        assert trial.value == pytest.approx(expected, abs=1e-6)
        history = client.get_metric_history(trial.user_attrs[attrs.MLFLOW_RUN], "val_loss")
        assert sorted(m.step for m in history) == [0, 1, 2]
