"""The CNN→LSTM workload on synthetic variable-length sequences (seed 000), run locally."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hpsearch import TrialContext, TrialPruned
from hpsearch.adapters import Member
from hpsearch.trial.protocol import Outcome
from hpsearch.workloads.sequences import (
    CHANNELS,
    MAX_LENGTH,
    MIN_LENGTH,
    build_model,
    collate,
    make_split,
    resolve_params,
    train,
    train_members,
)
from tests.workloads.conftest import member_history


def test_learns_above_chance_on_the_held_out_split() -> None:
    ctx = TrialContext.local()
    train({"epochs": 4, "train_size": 768, "hidden_size": 48}, ctx)
    accuracies = [h.metrics["val_accuracy"] for h in ctx.history]
    assert len(accuracies) == 4
    # Six classes: chance is 0.17. On one thread: 0.23, 0.32, 0.35, 0.51 (0.70 by the
    # sixth epoch, which took the test from 6 s to 11 s).
    assert max(accuracies) > 0.40
    assert ctx.history[-1].metrics["samples_per_sec"] > 0
    assert ctx.knobs["batch_size"] == 64


def test_data_is_fixed_variable_length_and_augmented_only_in_training() -> None:
    train_set, val_set = make_split(256)
    assert (len(train_set), len(val_set)) == (256, 512)
    lengths = {s.shape[1] for s in train_set.signals}
    assert min(lengths) >= MIN_LENGTH
    assert max(lengths) <= MAX_LENGTH
    assert len(lengths) > 10
    assert torch.equal(val_set[0][0], val_set[0][0])
    augmented = train_set.augmented(noise_std=0.5, mask_prob=0.2)
    assert not torch.equal(augmented[0][0], train_set[0][0])
    assert make_split(256) is make_split(256)  # cached for reused workers


def test_batches_are_padded_with_their_lengths() -> None:
    train_set, _ = make_split(256)
    signals, lengths, labels = collate([train_set[i] for i in range(5)])
    assert signals.shape == (5, CHANNELS, int(lengths.max()))
    assert labels.shape == (5,)
    shortest = int(lengths.argmin())
    assert float(signals[shortest, :, int(lengths[shortest]) :].abs().sum()) == 0.0


def test_stops_when_pruned_and_rejects_typos() -> None:
    ctx = TrialContext.local(prune_at=0)
    with pytest.raises(TrialPruned):
        train({"epochs": 3, "train_size": 128}, ctx)
    assert len(ctx.history) == 1
    with pytest.raises(ValueError, match="no parameter"):
        resolve_params({"hiden_size": 3})


def test_padding_does_not_change_what_the_model_computes() -> None:
    torch.manual_seed(0)
    params = resolve_params({"hidden_size": 16, "conv_channels": 8, "dropout": 0.0})
    model = build_model(params)
    train_set, _ = make_split(256)
    signals, lengths, _ = collate([train_set[i] for i in range(6)])
    padded = torch.nn.functional.pad(signals, (0, 20))
    with torch.no_grad():
        # In training, the batch statistics leave the padding out; in eval, the running ones.
        for mode in (model.train, model.eval):
            mode()
            torch.testing.assert_close(model(padded, lengths), model(signals, lengths))


SMALL = {"epochs": 2, "train_size": 128, "hidden_size": 16, "conv_channels": 8, "batch_size": 32}


def _members(lrs: list[float], **shape: object) -> list[Member]:
    return [
        Member({**SMALL, "lr": lr, **shape}, TrialContext.local(trial_number=k, seed=k))
        for k, lr in enumerate(lrs)
    ]


def test_fused_members_train_as_each_would_alone_and_a_pruned_one_leaves() -> None:
    members = _members([1e-3, 3e-3, 1e-2], dropout=0.2, noise_std=0.3, mask_prob=0.1)
    members[0] = Member(members[0].params, TrialContext.local(trial_number=0, seed=0, prune_at=0))
    train_members(members)
    assert members[0].outcome is Outcome.PRUNED
    assert [h.step for h in member_history(members[0])] == [0]
    for k, member in enumerate(members):
        alone = TrialContext.local(trial_number=k, seed=k)
        train({**member.params, "epochs": len(member_history(member))}, alone)
        fused = [h.metrics["train_loss"] for h in member_history(member)]
        assert fused == pytest.approx([h.metrics["train_loss"] for h in alone.history], rel=1e-5)
        # Near chance, a logit tie can fall either way on float noise: a sample or two.
        fused = [h.metrics["val_accuracy"] for h in member_history(member)]
        expected = [h.metrics["val_accuracy"] for h in alone.history]
        assert fused == pytest.approx(expected, abs=2 / 512)
    for member in members[1:]:
        assert member.outcome is Outcome.COMPLETE
        metrics = member_history(member)[-1].metrics
        assert metrics["samples_per_sec"] > 0
        assert metrics["samples_per_sec_solo"] > 0


def test_a_fused_member_resumes_from_its_own_checkpoint(tmp_path: Path) -> None:
    def group(epochs: int) -> list[Member]:
        return [
            Member(
                {**SMALL, "epochs": epochs, "lr": lr},
                TrialContext.local(trial_number=k, seed=k, checkpoint_dir=str(tmp_path / str(k))),
            )
            for k, lr in enumerate([1e-3, 1e-2])
        ]

    train_members(group(1))
    resumed = group(2)
    train_members(resumed)
    assert [[h.step for h in member_history(m)] for m in resumed] == [[1], [1]]
