"""The built-in digits workload, run without a search through a local context."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from hpsearch import TrialContext, TrialPruned
from hpsearch.adapters import Member
from hpsearch.trial.protocol import Outcome
from hpsearch.workloads.digits import DEFAULTS, load_split, resolve_params, train, train_members
from tests.workloads.conftest import member_history


def test_learns_digits_and_reports_each_epoch() -> None:
    ctx = TrialContext.local()
    train({"epochs": 8, "width": 64, "lr": 3e-3}, ctx)
    assert [h.step for h in ctx.history] == list(range(8))
    assert set(ctx.history[-1].metrics) == {
        "val_accuracy",
        "train_loss",
        "epoch_seconds",
        # from the toolkit's meter
        "samples_per_sec",
        "step_time_ms",
        "data_wait_share",
        "train_seconds",
        "peak_memory_mb",
    }
    assert ctx.history[-1].metrics["val_accuracy"] > 0.9
    assert ctx.history[-1].metrics["train_loss"] < ctx.history[0].metrics["train_loss"]
    assert all(h.metrics["samples_per_sec"] > 0 for h in ctx.history)


@pytest.mark.process
def test_dataloader_workers_give_the_same_kind_of_result() -> None:
    ctx = TrialContext.local()
    train({"epochs": 2, "num_workers": 1, "batch_size": 128}, ctx)
    assert len(ctx.history) == 2


def test_throughput_knobs_are_applied_and_recorded() -> None:
    ctx = TrialContext.local()
    params = {
        "epochs": 2,
        "batch_size": 32,
        "effective_batch_size": 128,
        "precision": "bf16",
        "grad_checkpointing": True,
        "prefetch_factor": 2,
    }
    train(params, ctx)
    assert ctx.knobs["grad_accum_steps"] == 4
    assert ctx.knobs["precision"] == "bf16"
    assert ctx.knobs["grad_checkpointing"] is True
    assert ctx.knobs["prefetch_factor"] is None  # no workers
    assert ctx.knob_notes == [
        "prefetch_factor: 2 -> None (DataLoader prefetches only with num_workers > 0)"
    ]
    assert ctx.history[-1].metrics["val_accuracy"] > 0.5


def test_stops_when_pruned() -> None:
    ctx = TrialContext.local(prune_at=1)
    with pytest.raises(TrialPruned):
        train({"epochs": 5}, ctx)
    assert [h.step for h in ctx.history] == [0, 1]


def test_unknown_parameter_is_an_error() -> None:
    with pytest.raises(ValueError, match="no parameter"):
        resolve_params({"widht": 3})
    assert resolve_params({"width": 3})["depth"] == DEFAULTS["depth"]
    assert resolve_params({"precision": "bf16"})["precision"] == "bf16"  # a toolkit knob


def test_split_is_fixed_and_stratified_and_read_without_importing_scikit_learn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "sklearn", None)  # any import of it now fails
    load_split.cache_clear()
    x_train, y_train, x_val, y_val = load_split()
    assert len(x_train) + len(x_val) == 1797  # every sample, each on one side
    assert x_val.shape[1] == 64
    assert float(x_train.min()) == 0.0
    assert float(x_train.max()) == 1.0
    for digit in range(10):  # each class gives a fifth of its samples to validation
        in_train, in_val = int((y_train == digit).sum()), int((y_val == digit).sum())
        assert in_val == round((in_train + in_val) * 0.2)
    load_split.cache_clear()
    assert load_split()[3].tolist() == y_val.tolist()  # fixed: the same split every time


def test_an_interrupted_trial_resumes_after_its_last_checkpoint(tmp_path: Path) -> None:
    folder = str(tmp_path / "trial-0")
    whole = TrialContext.local(seed=5, checkpoint_dir=str(tmp_path / "whole"))
    train({"epochs": 4, "width": 32}, whole)
    first = TrialContext.local(seed=5, checkpoint_dir=folder)
    train({"epochs": 2, "width": 32}, first)  # stopped after epoch 1, as by an interruption
    again = TrialContext.local(seed=5, checkpoint_dir=folder)
    train({"epochs": 4, "width": 32}, again)
    assert [h.step for h in again.history] == [2, 3]
    # Model, optimizer, data order and dropout's generator all came back: the same run.
    assert again.history[-1].metrics["val_accuracy"] == whole.history[-1].metrics["val_accuracy"]
    assert again.history[-1].metrics["train_loss"] == whole.history[-1].metrics["train_loss"]


def test_the_trial_seed_decides_the_run() -> None:
    runs = [TrialContext.local(seed=seed) for seed in (1, 1, 2)]
    for ctx in runs:
        train({"epochs": 1, "width": 32}, ctx)
    losses = [ctx.history[-1].metrics["train_loss"] for ctx in runs]
    assert losses[0] == losses[1] != losses[2]


def _members(lrs: list[float], **shape: object) -> list[Member]:
    return [
        Member(
            {"epochs": 2, "width": 16, "depth": 1, "lr": lr, **shape},
            TrialContext.local(trial_number=k, seed=k),
        )
        for k, lr in enumerate(lrs)
    ]


@pytest.mark.parametrize(
    "shape",
    [
        {"batch_size": 64, "dropout": 0.2},
        # Accumulated over micro-batches, the last window of each epoch partly filled.
        {"batch_size": 48, "grad_accum_steps": 3},
    ],
)
def test_fused_members_train_as_each_would_alone(shape: dict[str, Any]) -> None:
    members = _members([1e-3, 3e-3, 1e-2], **shape)
    train_members(members)
    for k, member in enumerate(members):
        alone = TrialContext.local(trial_number=k, seed=k)
        train({**member.params}, alone)
        fused = [h.metrics["val_accuracy"] for h in member_history(member)]
        assert fused == pytest.approx([h.metrics["val_accuracy"] for h in alone.history], rel=1e-5)
        metrics = member_history(member)[-1].metrics
        # Its share of the group's speed, and its shape's alone (what objectives read).
        assert metrics["samples_per_sec"] > 0
        assert metrics["samples_per_sec_solo"] > 0
        assert member.outcome is Outcome.COMPLETE


def test_a_pruned_member_leaves_and_the_others_finish() -> None:
    members = _members([1e-3, 3e-3], batch_size=64)
    members[0] = Member(members[0].params, TrialContext.local(trial_number=0, prune_at=0))
    train_members(members)
    assert members[0].outcome is Outcome.PRUNED
    assert [h.step for h in member_history(members[0])] == [0]
    assert members[1].outcome is Outcome.COMPLETE
    assert [h.step for h in member_history(members[1])] == [0, 1]


def test_a_fused_member_resumes_from_its_own_checkpoint(tmp_path: Path) -> None:
    def group(epochs: int) -> list[Member]:
        return [
            Member(
                {"epochs": epochs, "width": 16, "depth": 1, "lr": lr, "batch_size": 64},
                TrialContext.local(trial_number=k, seed=k, checkpoint_dir=str(tmp_path / str(k))),
            )
            for k, lr in enumerate([1e-3, 1e-2])
        ]

    train_members(group(2))
    resumed = group(3)
    train_members(resumed)
    assert [[h.step for h in member_history(m)] for m in resumed] == [[2], [2]]


def test_members_of_another_shape_are_refused() -> None:
    members = _members([1e-3, 1e-2], batch_size=64)
    members[1] = Member({**members[1].params, "width": 32}, members[1].ctx)
    with pytest.raises(ValueError, match=r"trial 1 differs from its group in \['width'\]"):
        train_members(members)
