"""The simulated-GPU workload: its load model and its modelled training, without a search."""

from __future__ import annotations

import pytest

from hpsearch import TrialContext, TrialPruned
from hpsearch.adapters import Member
from hpsearch.trial.context import LocalTrialContext
from hpsearch.workloads.simulated_gpu import (
    final_accuracy,
    gpu_profile,
    plan,
    train,
    train_members,
)


def test_bigger_batches_and_models_use_the_gpu_more() -> None:
    small = gpu_profile(32, 128, 1)
    bigger_batch = gpu_profile(512, 128, 1)
    wider = gpu_profile(32, 1024, 1)
    assert small.utilization_pct < bigger_batch.utilization_pct
    assert small.utilization_pct < wider.utilization_pct
    assert small.memory_mb < bigger_batch.memory_mb
    assert small.memory_mb < wider.memory_mb
    assert 0 < small.utilization_pct < 20  # a seed-004-like job: small and input-bound
    assert gpu_profile(512, 2048, 4).utilization_pct > 90
    for profile in (small, bigger_batch, wider):
        assert profile.samples_per_sec == pytest.approx(
            {small: 32, bigger_batch: 512, wider: 32}[profile] / profile.step_time_s
        )


def test_a_trial_on_a_shared_simulated_gpu_runs_at_the_pace_it_is_given() -> None:
    params = {"batch_size": 64, "width": 256, "depth": 1, "epochs": 1, "time_scale": 0.01}
    alone, shared = TrialContext.local(), TrialContext.local(speed_share=0.5)
    train(params, alone)
    train(params, shared)
    solo = gpu_profile(64, 256, 1).samples_per_sec
    assert alone.history[-1].metrics["samples_per_sec"] == pytest.approx(solo)
    # At half its solo speed its epoch does the same work in twice the time.
    assert shared.history[-1].metrics["samples_per_sec"] == pytest.approx(solo / 2)
    assert shared.history[-1].metrics["step_time_ms"] == pytest.approx(
        2 * alone.history[-1].metrics["step_time_ms"]
    )


def test_accuracy_rewards_capacity_and_a_good_learning_rate() -> None:
    assert final_accuracy(64, 512, 2, 3e-3) > final_accuracy(64, 64, 1, 3e-3)
    assert final_accuracy(64, 512, 2, 3e-3) > final_accuracy(64, 512, 2, 1e-1)
    assert 0.1 <= final_accuracy(64, 16, 1, 1.0) <= 0.99


def test_train_declares_its_load_and_reports_each_epoch() -> None:
    ctx = TrialContext.local()
    params = {"batch_size": 64, "width": 256, "depth": 2, "epochs": 3, "time_scale": 0.01}
    train(params, ctx)
    profile = gpu_profile(64, 256, 2)
    assert ctx.gpu_loads == [(profile.utilization_pct, profile.memory_mb)]
    assert [h.step for h in ctx.history] == [0, 1, 2]
    last = ctx.history[-1].metrics
    assert last["samples_per_sec"] == pytest.approx(profile.samples_per_sec)
    assert ctx.history[0].metrics["val_accuracy"] < last["val_accuracy"]


def test_train_prunes_and_rejects_unknown_params() -> None:
    with pytest.raises(TrialPruned):
        train({"epochs": 5, "time_scale": 0.0}, TrialContext.local(prune_at=1))
    with pytest.raises(ValueError, match=r"no parameter\(s\) \['dropout'\]"):
        train({"dropout": 0.1}, TrialContext.local())


def test_a_fused_group_reports_each_members_share_and_its_solo_twin() -> None:
    members = [
        Member({"lr": lr, "epochs": 2, "time_scale": 0.001}, TrialContext.local(trial_number=k))
        for k, lr in enumerate([1e-3, 1e-2])
    ]
    train_members(members)
    solo = plan({"epochs": 2, "time_scale": 0.001}).epochs[-1].metrics["samples_per_sec"]
    for member in members:
        ctx = member.ctx
        assert isinstance(ctx, LocalTrialContext)
        last = ctx.history[-1].metrics
        assert last["samples_per_sec_solo"] == pytest.approx(solo)
        assert last["samples_per_sec"] < solo  # its share of the group's, slowed
    # Each its own learning rate: its own accuracy.
    accuracies = [
        m.ctx.history[-1].metrics["val_accuracy"]
        for m in members
        if isinstance(m.ctx, LocalTrialContext)
    ]
    assert len(set(accuracies)) == 2


def test_a_fused_group_runs_out_of_the_memory_its_members_hold_together() -> None:
    import torch

    members = [
        Member(
            {"memory_mb": 1400, "time_scale": 0.001},
            TrialContext.local(trial_number=k, gpu_memory_mb=3000.0),
        )
        for k in range(4)
    ]
    with pytest.raises(torch.cuda.OutOfMemoryError, match="a fused group of 4 needs 3770 MiB"):
        train_members(members)
    train_members(members[:2])  # 2190 MiB (one 610 MiB context): fits
