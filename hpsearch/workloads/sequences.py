"""A CNN→LSTM sequence classifier on synthetic variable-length signals (after seed 000).

Use it as ``train: hpsearch.workloads.sequences:train``. Seed 000 tuned such a
model by hand on an RTX 4060 (batch size, workers, prefetch, pinned memory,
AMP, cudnn.benchmark) and read ~105 samples/s off the console; here the same
shape of job is searched and measured.

The data (generated, no download): each sequence has ``channels`` channels and
a length drawn from ``min_length``-``max_length``; its class decides the
frequency of a sinusoid it carries on a class-specific pair of channels, under
Gaussian noise and a random phase. Training batches get the seed's
augmentations in the DataLoader workers: extra noise (``noise_std``) and
time masking (``mask_prob`` of the steps zeroed in spans). Batches are padded
to their longest sequence and the LSTM reads them packed, so padding costs no
compute. Accuracy is measured on a held-out split without augmentation.

Model parameters: ``conv_channels``, ``conv_layers``, ``kernel_size``,
``hidden_size``, ``lstm_layers``, ``dropout``, ``lr``, ``weight_decay``; plus
every throughput knob of :mod:`hpsearch.torch`.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence
from torch.utils.data import Dataset

from hpsearch.torch import TrainingSetup, checkpointed, configure
from hpsearch.trial.context import TrialContext, TrialPruned
from hpsearch.workloads import _params

DEFAULTS: dict[str, Any] = {
    "epochs": 8,
    "conv_channels": 32,
    "conv_layers": 2,
    "kernel_size": 5,
    "hidden_size": 64,
    "lstm_layers": 1,
    "dropout": 0.1,
    "lr": 3e-3,
    "weight_decay": 1e-4,
    "noise_std": 0.3,
    "mask_prob": 0.1,
    "batch_size": 64,
    "train_size": 1024,
    "seed": None,
}
"""The model and data parameters the workload reads, and their defaults.

The throughput knobs of :class:`hpsearch.torch.Knobs` are read too.
"""

CHANNELS = 8
CLASSES = 6
MIN_LENGTH, MAX_LENGTH = 32, 96
VALIDATION_SIZE = 512
BASE_NOISE = 0.8


def resolve_params(params: dict[str, Any]) -> dict[str, Any]:
    """The workload's parameters over :data:`DEFAULTS`; unknown names are an error."""
    return _params.resolve_params(params, DEFAULTS, "sequences", knobs=True)


@functools.lru_cache(maxsize=4)
def make_split(train_size: int, seed: int = 0) -> tuple[SignalSet, SignalSet]:
    """A fixed train split of ``train_size`` sequences and a validation split of 512.

    Cached, so a reused trial worker does not generate it again.
    """
    generator = torch.Generator().manual_seed(1000 + seed)
    signals, labels = _generate(train_size + VALIDATION_SIZE, generator)
    return (
        SignalSet(signals[:train_size], labels[:train_size]),
        SignalSet(signals[train_size:], labels[train_size:]),
    )


class SignalSet(Dataset[tuple[torch.Tensor, int]]):
    """Sequences ``[channels, length]`` and labels; augments each item when asked to."""

    def __init__(self, signals: list[torch.Tensor], labels: torch.Tensor) -> None:
        self.signals = signals
        self.labels = labels
        self.noise_std = 0.0
        self.mask_prob = 0.0

    def augmented(self, noise_std: float, mask_prob: float) -> SignalSet:
        """The same data, with noise and time masking applied as items are read."""
        copy = SignalSet(self.signals, self.labels)
        copy.noise_std, copy.mask_prob = noise_std, mask_prob
        return copy

    def __len__(self) -> int:
        return len(self.signals)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        signal = self.signals[index]
        if self.noise_std > 0:
            signal = signal + self.noise_std * torch.randn_like(signal)
        if self.mask_prob > 0:
            signal = _time_mask(signal, self.mask_prob)
        return signal, int(self.labels[index])


def collate(
    items: list[tuple[torch.Tensor, int]],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad a batch to its longest sequence: ``(signals [B, C, T], lengths [B], labels [B])``."""
    lengths = torch.tensor([signal.shape[1] for signal, _ in items])
    padded = torch.zeros(len(items), CHANNELS, int(lengths.max()))
    for row, (signal, _) in enumerate(items):
        padded[row, :, : signal.shape[1]] = signal
    return padded, lengths, torch.tensor([label for _, label in items])


class ConvLstm(nn.Module):
    """Length-preserving Conv1d blocks, an LSTM over the packed sequence, a linear head."""

    def __init__(
        self,
        *,
        conv_channels: int,
        conv_layers: int,
        kernel_size: int,
        hidden_size: int,
        lstm_layers: int,
        dropout: float,
    ) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        size = CHANNELS
        for _ in range(conv_layers):
            blocks += [
                nn.Conv1d(size, conv_channels, kernel_size, padding=kernel_size // 2),
                nn.BatchNorm1d(conv_channels),
                nn.ReLU(),
            ]
            size = conv_channels
        self.encoder: nn.Module = nn.Sequential(*blocks)
        self.lstm = nn.LSTM(
            size,
            hidden_size,
            num_layers=lstm_layers,
            batch_first=True,
            dropout=dropout if lstm_layers > 1 else 0.0,
        )
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden_size, CLASSES))

    def forward(self, signals: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        features = self.encoder(signals).transpose(1, 2)  # [B, T, C]
        packed = pack_padded_sequence(
            features, lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        _, (hidden, _) = self.lstm(packed)
        logits: torch.Tensor = self.head(hidden[-1])
        return logits


def checkpoint_encoder(model: nn.Module) -> None:
    """The gradient-checkpointing hook: recompute the conv encoder's activations in backward."""
    assert isinstance(model, ConvLstm)
    model.encoder = checkpointed(model.encoder)


def train(params: dict[str, Any], ctx: TrialContext) -> None:
    """Train and validate for ``epochs``, reporting each epoch; stop early when pruned."""
    p = resolve_params(params)
    setup = configure(p, ctx)
    seed = _params.seed_of(p, ctx)
    torch.manual_seed(seed)
    order = torch.Generator().manual_seed(seed)
    train_set, val_set = make_split(int(p["train_size"]))
    loader = setup.loader(
        train_set.augmented(float(p["noise_std"]), float(p["mask_prob"])),
        shuffle=True,
        collate_fn=collate,
        generator=order,
    )
    val_loader = setup.loader(val_set, collate_fn=collate, batch_size=256)
    model = setup.prepare_model(
        ConvLstm(
            conv_channels=int(p["conv_channels"]),
            conv_layers=int(p["conv_layers"]),
            kernel_size=int(p["kernel_size"]),
            hidden_size=int(p["hidden_size"]),
            lstm_layers=int(p["lstm_layers"]),
            dropout=float(p["dropout"]),
        ),
        checkpointing=checkpoint_encoder,
    )
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=float(p["lr"]), weight_decay=float(p["weight_decay"])
    )
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(_params.resume(ctx, model, optimizer, order), int(p["epochs"])):
        model.train()
        started = time.perf_counter()
        total_loss = torch.zeros((), device=setup.device)
        seen = 0
        for host_signals, lengths, host_labels in setup.meter.iterate(loader):
            # The LSTM takes the lengths on the host; only signals and labels move.
            signals, labels = setup.to_device((host_signals, host_labels))
            with setup.autocast():
                loss = loss_fn(model(signals, lengths), labels)
            setup.backward(loss, optimizer, samples=len(labels))
            total_loss += loss.detach().float() * len(labels)
            seen += len(labels)
        setup.flush(optimizer)
        seconds = time.perf_counter() - started
        _params.save_epoch(ctx, epoch, model, optimizer, order)
        ctx.report(
            epoch,
            val_accuracy=_accuracy(model, val_loader, setup),
            train_loss=float(total_loss) / seen,
            epoch_seconds=seconds,
        )
        if ctx.should_prune():
            raise TrialPruned(f"pruned after epoch {epoch}")


def _accuracy(model: nn.Module, loader: Any, setup: TrainingSetup) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad(), setup.autocast():
        for host_signals, lengths, host_labels in loader:
            signals, labels = setup.to_device((host_signals, host_labels))
            correct += int((model(signals, lengths).argmax(dim=1) == labels).sum())
            total += len(labels)
    return correct / total


def _generate(count: int, generator: torch.Generator) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Signals whose class sets a sinusoid's frequency and the two channels it is on."""
    labels = torch.randint(0, CLASSES, (count,), generator=generator)
    lengths = torch.randint(MIN_LENGTH, MAX_LENGTH + 1, (count,), generator=generator)
    signals = []
    for label, length in zip(labels.tolist(), lengths.tolist(), strict=True):
        steps = torch.arange(length, dtype=torch.float32)
        frequency = 0.03 + 0.012 * label
        phase = float(torch.rand((), generator=generator)) * 2 * math.pi
        signal = BASE_NOISE * torch.randn(CHANNELS, length, generator=generator)
        wave = torch.sin(2 * math.pi * frequency * steps + phase)
        first = label % CHANNELS
        signal[first] += wave
        signal[(first + 3) % CHANNELS] += 0.5 * wave
        signals.append(signal)
    return signals, labels


def _time_mask(signal: torch.Tensor, share: float) -> torch.Tensor:
    """Zero about ``share`` of the time steps, in spans of up to 8 steps."""
    length = signal.shape[1]
    masked = signal.clone()
    spans = max(1, round(share * length / 4))
    starts = torch.randint(0, length, (spans,))
    widths = torch.randint(1, 9, (spans,))
    for start, width in zip(starts.tolist(), widths.tolist(), strict=True):
        masked[:, start : start + width] = 0.0
    return masked
