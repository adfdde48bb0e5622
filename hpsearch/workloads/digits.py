"""A real classifier on scikit-learn's bundled digits (8x8 images, 10 classes; no download).

Use it as ``train: hpsearch.workloads.digits:train``. It searches model
parameters (``width``, ``depth``, ``dropout``, ``lr``, ``weight_decay``) together
with every throughput knob of :mod:`hpsearch.torch` (``batch_size``,
``num_workers``, ``precision``, ``grad_accum_steps``, ``channels_last``,
``compile``, ...), and reports ``val_accuracy``, ``train_loss`` and
``epoch_seconds`` each epoch, plus the toolkit's throughput figures
(``samples_per_sec``, ``step_time_ms``, ``data_wait_share``, ``peak_memory_mb``,
``train_seconds``). A trial takes seconds on a CPU; on a GPU it runs unchanged.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from importlib import metadata
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpsearch.adapters import Member, fused
from hpsearch.torch import KNOB_NAMES, checkpointed, configure
from hpsearch.torch.fused import FusedModule, MemberBatches, fuse
from hpsearch.trial.context import TrialContext, TrialPruned
from hpsearch.workloads import _params
from hpsearch.workloads._fused_group import FusedGroup

DEFAULTS: dict[str, Any] = {
    "epochs": 20,
    "width": 128,
    "depth": 2,
    "dropout": 0.1,
    "lr": 3e-3,
    "weight_decay": 1e-4,
    "batch_size": 64,
    "seed": None,
}
"""The model parameters the workload reads, and their values when the space leaves them out.

The throughput knobs of :class:`hpsearch.torch.Knobs` are read too, with the toolkit's defaults.
"""

VALIDATION_SHARE = 0.2
DIGITS_CSV = "sklearn/datasets/data/digits.csv.gz"
"""The 1,797 8x8 digits (64 pixel columns of 0-16, then the label), as scikit-learn ships them."""


@functools.lru_cache(maxsize=1)
def load_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Digits as float tensors scaled to [0, 1]: a fixed stratified train/validation split.

    Read straight from the CSV that scikit-learn ships (``load_digits``'s own file),
    without importing scikit-learn: that import (SciPy's included) took 2 of a cold
    trial's 4.6 s on CPU, paid by every new trial worker, so by every packed one at once.
    Cached, so a reused trial worker does not reload it.
    """
    csv = metadata.distribution("scikit-learn").locate_file(DIGITS_CSV)
    table = np.loadtxt(str(csv), delimiter=",")
    features, labels = table[:, :-1] / 16.0, table[:, -1].astype(np.int64)
    # Stratified: each class gives the same share of its samples to validation.
    rng = np.random.default_rng(0)
    validation = np.zeros(len(labels), dtype=bool)
    for digit in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == digit))
        validation[members[: round(len(members) * VALIDATION_SHARE)]] = True
    train_rows = rng.permutation(np.flatnonzero(~validation))
    val_rows = np.flatnonzero(validation)
    return (
        torch.tensor(features[train_rows], dtype=torch.float32),
        torch.tensor(labels[train_rows], dtype=torch.long),
        torch.tensor(features[val_rows], dtype=torch.float32),
        torch.tensor(labels[val_rows], dtype=torch.long),
    )


def build_model(width: int, depth: int, dropout: float) -> nn.Module:
    """An MLP: ``depth`` hidden layers of ``width`` units with ReLU and dropout."""
    layers: list[nn.Module] = []
    size = 64
    for _ in range(depth):
        layers += [nn.Linear(size, width), nn.ReLU(), nn.Dropout(dropout)]
        size = width
    layers.append(nn.Linear(size, 10))
    return nn.Sequential(*layers)


def resolve_params(params: dict[str, Any]) -> dict[str, Any]:
    """The workload's parameters: ``params`` over :data:`DEFAULTS`; unknown names are an error."""
    return _params.resolve_params(params, DEFAULTS, "digits", knobs=True)


def checkpoint_hidden_layers(model: nn.Module) -> None:
    """The gradient-checkpointing hook: recompute each hidden layer's activations in backward."""
    assert isinstance(model, nn.Sequential)
    for index in range(len(model) - 1):
        if isinstance(model[index], nn.Linear):
            model[index] = checkpointed(model[index])


def train(params: dict[str, Any], ctx: TrialContext) -> None:
    """Train and validate for ``epochs``, reporting each epoch; stop early when pruned."""
    p = resolve_params(params)
    setup = configure(p, ctx)
    seed = _params.seed_of(p, ctx)
    torch.manual_seed(seed)
    order = torch.Generator().manual_seed(seed)
    x_train, y_train, x_val, y_val = load_split()
    loader = setup.loader(
        TensorDataset(x_train, y_train),
        shuffle=True,
        generator=order,
    )
    # Made on its device: a model too large for the GPU runs out there at once, not
    # after its weights were drawn in host memory (a 65536-wide layer: 17 GB).
    with torch.device(setup.device):
        built = build_model(int(p["width"]), int(p["depth"]), float(p["dropout"]))
    model = setup.prepare_model(built, checkpointing=checkpoint_hidden_layers)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=float(p["lr"]), weight_decay=float(p["weight_decay"])
    )
    loss_fn = nn.CrossEntropyLoss()
    x_val, y_val = setup.to_device((x_val, y_val))

    for epoch in range(_params.resume(ctx, model, optimizer, order), int(p["epochs"])):
        model.train()
        started = time.perf_counter()
        total_loss = torch.zeros((), device=setup.device)
        seen = 0
        for inputs, targets in setup.batches(loader):
            loss = setup.train_step(model, optimizer, loss_fn, inputs, targets)
            total_loss += loss.float() * len(targets)
            seen += len(targets)
        setup.flush(optimizer)
        seconds = time.perf_counter() - started

        model.eval()
        with torch.no_grad(), setup.autocast():
            accuracy = (model(x_val).argmax(dim=1) == y_val).float().mean().item()
        _params.save_epoch(ctx, epoch, model, optimizer, order)
        ctx.report(
            epoch,
            val_accuracy=accuracy,
            train_loss=float(total_loss) / seen,
            epoch_seconds=seconds,
        )
        if ctx.should_prune():
            raise TrialPruned(f"pruned after epoch {epoch}")


SHARED = ("epochs", "width", "depth", "batch_size", *sorted(KNOB_NAMES - {"batch_size"}))
"""What a fused group's members share: the model's shape, the batch and every knob."""


@fused(shared=SHARED)
def train_members(members: list[Member]) -> None:
    """Train a fused group (``fusion.train``): one model for all, each member its own trial.

    Each member has its own learning rate, weight decay, dropout and seed (its
    initialisation, its data order and its dropout masks, as it would alone),
    reports its own epochs and is pruned on its own; the shared ones must agree.
    Mixed precision is ``precision: bf16`` autocast (fp16 adds a loss scale per
    member on CUDA), and gradient accumulation (``grad_accum_steps`` or
    ``effective_batch_size``) is done as one trial does it; the other knobs apply to
    one trial only and are noted as such.
    A member that leaves (pruned, diverged, done) leaves the stack: the others
    train on untouched, each epoch costing only theirs.
    """
    _Group(members).run()


class _Group(FusedGroup):
    """A fused digits group: stacked MLPs, each member's batches of the in-memory split."""

    def __init__(self, members: list[Member]) -> None:
        x_train, y_train, self.x_val, self.y_val = load_split()
        self.train_split = (x_train, y_train)
        super().__init__(members, resolve=resolve_params, shared=SHARED, train=train)

    def build_member(self, params: dict[str, Any]) -> nn.Module:
        return build_model(int(params["width"]), int(params["depth"]), float(params["dropout"]))

    def fuse_members(self, modules: list[nn.Module]) -> FusedModule:
        return fuse(modules, generators=self.streams)

    def member_data(self, params: dict[str, Any]) -> MemberBatches:
        tensors = [t.to(self.device) for t in self.train_split]
        return MemberBatches(tensors, int(params["batch_size"]), self.orders)

    def validation_outputs(self) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        x_val, y_val = self.x_val.to(self.device), self.y_val.to(self.device)
        yield self.model(x_val.expand(len(self.open), *x_val.shape)), y_val
