"""The built-in digits workload, run without a search through a local context."""

from __future__ import annotations

import pytest

from hpsearch import TrialContext, TrialPruned
from hpsearch.workloads.digits import DEFAULTS, load_split, resolve_params, train


def test_learns_digits_and_reports_each_epoch() -> None:
    ctx = TrialContext.local()
    train({"epochs": 8, "width": 64, "lr": 3e-3}, ctx)
    assert [h.step for h in ctx.history] == list(range(8))
    assert set(ctx.history[-1].metrics) == {
        "val_accuracy",
        "train_loss",
        "samples_per_sec",
        "epoch_seconds",
    }
    assert ctx.history[-1].metrics["val_accuracy"] > 0.9
    assert ctx.history[-1].metrics["train_loss"] < ctx.history[0].metrics["train_loss"]
    assert all(h.metrics["samples_per_sec"] > 0 for h in ctx.history)


def test_dataloader_workers_give_the_same_kind_of_result() -> None:
    ctx = TrialContext.local()
    train({"epochs": 2, "num_workers": 1, "batch_size": 128}, ctx)
    assert len(ctx.history) == 2


def test_stops_when_pruned() -> None:
    ctx = TrialContext.local(prune_at=1)
    with pytest.raises(TrialPruned):
        train({"epochs": 5}, ctx)
    assert [h.step for h in ctx.history] == [0, 1]


def test_unknown_parameter_is_an_error() -> None:
    with pytest.raises(ValueError, match="no parameter"):
        resolve_params({"widht": 3})
    assert resolve_params({"width": 3})["depth"] == DEFAULTS["depth"]


def test_split_is_fixed_and_stratified() -> None:
    x_train, _, x_val, y_val = load_split()
    assert x_train.shape[1] == 64
    assert len(x_val) == 360
    assert set(y_val.tolist()) == set(range(10))
    assert float(x_train.max()) <= 1.0
