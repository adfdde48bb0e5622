"""A CNN→LSTM sequence classifier on synthetic variable-length signals (after seed 000).

Use it as ``train: hpsearch.workloads.sequences:train`` (and ``train_members`` for
fused trials). Seed 000 tuned such a
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
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.functional import pad
from torch.nn.utils.rnn import pack_padded_sequence
from torch.utils.data import DataLoader, Dataset, get_worker_info

from hpsearch.adapters import Member, fused
from hpsearch.torch import KNOB_NAMES, TrainingSetup, checkpointed, configure
from hpsearch.torch.fused import FusedModule
from hpsearch.trial.context import TrialContext, TrialPruned
from hpsearch.workloads import _params
from hpsearch.workloads._fused_group import FusedGroup

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
        self.generator: torch.Generator | None = None

    def augmented(
        self, noise_std: float, mask_prob: float, generator: torch.Generator | None = None
    ) -> SignalSet:
        """The same data, with noise and time masking applied as items are read.

        Read in the trial's own process, the augmentation draws from ``generator``
        (a trial's data order: its run is then the same alone and fused); in a
        DataLoader worker, from the worker's own seeded stream.
        """
        copy = SignalSet(self.signals, self.labels)
        copy.noise_std, copy.mask_prob = noise_std, mask_prob
        copy.generator = generator
        return copy

    def __len__(self) -> int:
        return len(self.signals)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        signal = self.signals[index]
        generator = self.generator if get_worker_info() is None else None
        if self.noise_std > 0:
            noise = torch.randn(signal.shape, generator=generator)
            signal = signal + self.noise_std * noise
        if self.mask_prob > 0:
            signal = _time_mask(signal, self.mask_prob, generator)
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


def masked_batch_norm(
    x: torch.Tensor, mask: torch.Tensor, norm: MaskedBatchNorm | FusedMaskedBatchNorm
) -> torch.Tensor:
    """Batch normalisation of ``x [..., B, C, T]`` over its real steps (``mask [..., B, 1, T]``)
    only, with ``norm``'s scale, shift and running statistics (``[..., C]``, any leading
    member axes): as ``nn.BatchNorm1d``, padding left out."""
    if norm.training:
        count = mask.sum(dim=(-3, -1))
        mean = (x * mask).sum(dim=(-3, -1)) / count
        var = ((x - mean[..., None, :, None]) * mask).pow(2).sum(dim=(-3, -1)) / count
        with torch.no_grad():  # as nn.BatchNorm1d: the running variance unbiased
            norm.running_mean.lerp_(mean.detach(), norm.momentum)
            norm.running_var.lerp_(var.detach() * count / (count - 1), norm.momentum)
    else:
        mean, var = norm.running_mean, norm.running_var
    scale = norm.weight * torch.rsqrt(var + norm.eps)
    shift = norm.bias - mean * scale
    return x * scale[..., None, :, None] + shift[..., None, :, None]


class MaskedBatchNorm(nn.Module):
    """``nn.BatchNorm1d`` over each sequence's real steps: padding changes nothing it computes."""

    running_mean: torch.Tensor
    running_var: torch.Tensor

    def __init__(self, channels: int, eps: float = 1e-5, momentum: float = 0.1) -> None:
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return masked_batch_norm(x, mask, self)


class ConvBlock(nn.Module):
    """A length-preserving Conv1d, a batch normalisation over the real steps, ReLU; the
    steps past each sequence's length are zeroed, so padding never reaches a real step."""

    def __init__(self, size: int, channels: int, kernel_size: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(size, channels, kernel_size, padding=kernel_size // 2)
        self.norm = MaskedBatchNorm(channels)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.conv(x), mask)) * mask


class ConvLstm(nn.Module):
    """Conv blocks, an LSTM over the packed sequence, a linear head.

    What it computes for a sequence does not depend on how far its batch is
    padded (the normalisation's statistics leave padding out, padded steps are
    zeroed, the LSTM reads the packed sequence), so a fused member padded to its group's longest
    batch computes what it does alone.
    """

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
        sizes = [CHANNELS] + [conv_channels] * conv_layers
        self.blocks = nn.ModuleList(
            ConvBlock(size, conv_channels, kernel_size) for size in sizes[:-1]
        )
        self.lstm = nn.LSTM(
            sizes[-1],
            hidden_size,
            num_layers=lstm_layers,
            batch_first=True,
            dropout=dropout if lstm_layers > 1 else 0.0,
        )
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden_size, CLASSES))

    def forward(self, signals: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = signals
        mask = step_mask(lengths, x.shape[-1]).to(x.device, x.dtype)
        for block in self.blocks:
            x = block(x, mask)
        packed = pack_padded_sequence(
            x.transpose(1, 2), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        _, (hidden, _) = self.lstm(packed)
        logits: torch.Tensor = self.head(hidden[-1])
        return logits


def build_model(params: dict[str, Any]) -> ConvLstm:
    """The model ``params`` (resolved) describe."""
    return ConvLstm(
        conv_channels=int(params["conv_channels"]),
        conv_layers=int(params["conv_layers"]),
        kernel_size=int(params["kernel_size"]),
        hidden_size=int(params["hidden_size"]),
        lstm_layers=int(params["lstm_layers"]),
        dropout=float(params["dropout"]),
    )


def step_mask(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """``[..., 1, steps]``: 1 at each sequence's real steps, 0 past its length."""
    at = torch.arange(steps, device=lengths.device)
    return (at < lengths.unsqueeze(-1)).unsqueeze(-2)


def checkpoint_encoder(model: nn.Module) -> None:
    """The gradient-checkpointing hook: recompute the conv blocks' activations in backward."""
    assert isinstance(model, ConvLstm)
    for index, block in enumerate(model.blocks):
        model.blocks[index] = checkpointed(block)


def train(params: dict[str, Any], ctx: TrialContext) -> None:
    """Train and validate for ``epochs``, reporting each epoch; stop early when pruned."""
    p = resolve_params(params)
    setup = configure(p, ctx)
    seed = _params.seed_of(p, ctx)
    torch.manual_seed(seed)
    order = torch.Generator().manual_seed(seed)
    train_set, val_set = make_split(int(p["train_size"]))
    loader = setup.loader(
        train_set.augmented(float(p["noise_std"]), float(p["mask_prob"]), order),
        shuffle=True,
        collate_fn=collate,
        generator=order,
    )
    # Its own generator: reading the validation split draws a seed, which would shift
    # the trial's dropout masks from the next epoch on, depending on how it validates.
    val_loader = setup.loader(
        val_set, collate_fn=collate, batch_size=256, generator=torch.Generator()
    )
    model = setup.prepare_model(build_model(p), checkpointing=checkpoint_encoder)
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


SHARED = (
    "epochs",
    "conv_channels",
    "conv_layers",
    "kernel_size",
    "hidden_size",
    "lstm_layers",
    "train_size",
    "noise_std",
    "mask_prob",
    "batch_size",
    *sorted(KNOB_NAMES - {"batch_size"}),
)
"""What a fused group's members share: the model's shape, the data pipeline, every knob."""


@fused(shared=SHARED)
def train_members(members: list[Member]) -> None:
    """Train a fused group (``fusion.train``): one model for all, each member its own trial.

    Each member has its own learning rate, weight decay, dropout and seed (its
    initialisation, its data order and augmentation, its dropout masks), reports
    its own epochs and is pruned on its own; the shared ones must agree. Its
    batches are the ones it draws alone, padded to the group's longest, which
    changes nothing it computes (see :class:`ConvLstm`); with one LSTM layer it
    trains as it would alone. Between LSTM layers, its dropout masks are its own
    but not those ``nn.LSTM`` draws. The data is read in the group's process
    (``num_workers`` applies to one trial only, and is noted as such).
    """
    _Group(members).run()


class FusedConvLstm(FusedModule):
    """K :class:`ConvLstm` of one shape: ``forward(signals [K, B, C, T], lengths [K, B])``."""

    def __init__(
        self, models: Sequence[ConvLstm], generators: Sequence[torch.Generator] | None = None
    ) -> None:
        from hpsearch.torch.fused import FusedConv, FusedLSTM, fuse

        super().__init__()
        self.members = len(models)
        blocks = [[_block(m, i) for m in models] for i in range(len(models[0].blocks))]
        self.convs = nn.ModuleList(FusedConv([b.conv for b in block]) for block in blocks)
        self.norms = nn.ModuleList(FusedMaskedBatchNorm([b.norm for b in bs]) for bs in blocks)
        self.lstm = FusedLSTM([m.lstm for m in models], generators)
        self.head = fuse([m.head for m in models], generators=generators)

    def forward(self, signals: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = signals
        mask = step_mask(lengths, x.shape[-1]).to(x.device, x.dtype)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            x = torch.relu(norm(conv(x), mask)) * mask
        _, (hidden, _) = self.lstm(x.transpose(-1, -2), lengths)
        logits: torch.Tensor = self.head(hidden[:, -1])
        return logits

    def member_state_dict(self, member: int) -> dict[str, torch.Tensor]:
        parts: list[tuple[str, nn.Module]] = []
        for index, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            parts += [(f"blocks.{index}.conv", conv), (f"blocks.{index}.norm", norm)]
        parts += [("lstm", self.lstm), ("head", self.head)]
        state: dict[str, torch.Tensor] = {}
        for prefix, part in parts:
            assert isinstance(part, FusedModule)
            for key, value in part.member_state_dict(member).items():
                state[f"{prefix}.{key}"] = value
        return state


class FusedMaskedBatchNorm(FusedModule):
    """K :class:`MaskedBatchNorm`: each member's own statistics, over its own real steps."""

    weight: nn.Parameter
    bias: nn.Parameter
    running_mean: torch.Tensor
    running_var: torch.Tensor

    def __init__(self, norms: Sequence[nn.Module]) -> None:
        super().__init__()
        first = norms[0]
        assert isinstance(first, MaskedBatchNorm)
        self.members = len(norms)
        self.eps, self.momentum = first.eps, first.momentum
        for name in ("weight", "bias"):
            stacked = torch.stack([n.get_parameter(name).detach() for n in norms])
            setattr(self, name, nn.Parameter(stacked.clone()))
        for name in ("running_mean", "running_var"):
            self.register_buffer(name, torch.stack([n.get_buffer(name) for n in norms]).clone())

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return masked_batch_norm(x, mask, self)

    def member_state_dict(self, member: int) -> dict[str, torch.Tensor]:
        return {
            "weight": self.weight[member],
            "bias": self.bias[member],
            "running_mean": self.running_mean[member],
            "running_var": self.running_var[member],
        }


def _block(model: ConvLstm, index: int) -> ConvBlock:
    block = model.blocks[index]
    assert isinstance(block, ConvBlock)
    return block


class _MemberLoaders:
    """Each member's own DataLoader (its order and augmentation); one step's batches
    padded to the longest and stacked: ``((signals, lengths), labels)``."""

    def __init__(self, loaders: list[DataLoader[Any]], device: str) -> None:
        self.loaders = loaders
        self.device = device

    def select(self, keep: Sequence[int]) -> None:
        self.loaders = [self.loaders[k] for k in keep]

    def __iter__(self) -> Iterator[tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]]:
        for batches in zip(*self.loaders, strict=True):
            steps = max(int(signals.shape[-1]) for signals, _, _ in batches)
            signals = torch.stack([pad(s, (0, steps - s.shape[-1])) for s, _, _ in batches])
            lengths = torch.stack([b[1] for b in batches])
            labels = torch.stack([b[2] for b in batches])
            device = self.device
            yield (signals.to(device), lengths.to(device)), labels.to(device)


class _Group(FusedGroup):
    """A fused sequences group: stacked CNN→LSTMs, each member's own loader."""

    def __init__(self, members: list[Member]) -> None:
        self.val_loader: DataLoader[Any] | None = None
        super().__init__(members, resolve=resolve_params, shared=SHARED, train=train)

    def build_member(self, params: dict[str, Any]) -> nn.Module:
        return build_model(params)

    def fuse_members(self, modules: list[nn.Module]) -> FusedModule:
        models = [m for m in modules if isinstance(m, ConvLstm)]
        assert len(models) == len(modules), "build_member makes ConvLstm models"
        return FusedConvLstm(models, self.streams)

    def member_data(self, params: dict[str, Any]) -> _MemberLoaders:
        train_set, val_set = make_split(int(params["train_size"]))
        self.val_loader = DataLoader(
            val_set, batch_size=256, collate_fn=collate, generator=torch.Generator()
        )
        noise, mask = float(params["noise_std"]), float(params["mask_prob"])
        loaders: list[DataLoader[Any]] = [
            DataLoader(
                train_set.augmented(noise, mask, order),
                batch_size=int(params["batch_size"]),
                shuffle=True,
                collate_fn=collate,
                generator=order,
            )
            for order in self.orders
        ]
        return _MemberLoaders(loaders, self.device)

    def validation_outputs(self) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        assert self.val_loader is not None
        k = len(self.open)
        for host_signals, host_lengths, labels in self.val_loader:
            signals, lengths = host_signals.to(self.device), host_lengths.to(self.device)
            inputs = signals.expand(k, *signals.shape), lengths.expand(k, *lengths.shape)
            yield self.model(*inputs), labels.to(self.device)


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


def _time_mask(
    signal: torch.Tensor, share: float, generator: torch.Generator | None
) -> torch.Tensor:
    """Zero about ``share`` of the time steps, in spans of up to 8 steps."""
    length = signal.shape[1]
    masked = signal.clone()
    spans = max(1, round(share * length / 4))
    starts = torch.randint(0, length, (spans,), generator=generator)
    widths = torch.randint(1, 9, (spans,), generator=generator)
    for start, width in zip(starts.tolist(), widths.tolist(), strict=True):
        masked[:, start : start + width] = 0.0
    return masked
