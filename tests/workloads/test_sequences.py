"""The CNN→LSTM workload on synthetic variable-length sequences (seed 000), run locally."""

from __future__ import annotations

import pytest
import torch

from hpsearch import TrialContext, TrialPruned
from hpsearch.workloads.sequences import (
    CHANNELS,
    MAX_LENGTH,
    MIN_LENGTH,
    collate,
    make_split,
    resolve_params,
    train,
)


def test_learns_above_chance_on_the_held_out_split() -> None:
    ctx = TrialContext.local()
    train({"epochs": 6, "train_size": 768, "hidden_size": 48}, ctx)
    accuracies = [h.metrics["val_accuracy"] for h in ctx.history]
    assert len(accuracies) == 6
    assert max(accuracies) > 0.5  # six classes: chance is 0.17
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
