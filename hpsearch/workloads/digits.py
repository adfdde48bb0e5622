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
import math
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpsearch.torch import KNOB_NAMES, checkpointed, configure, knobs_from_params
from hpsearch.trial.context import TrialContext, TrialPruned
from hpsearch.trial.members import Member, fused
from hpsearch.workloads import _params

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


@functools.lru_cache(maxsize=1)
def load_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Digits as float tensors scaled to [0, 1]: a fixed stratified train/validation split.

    Cached, so a reused trial worker does not reload it.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    features, labels = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(
        features / 16.0, labels, test_size=VALIDATION_SHARE, stratify=labels, random_state=0
    )
    return (
        torch.tensor(x_train, dtype=torch.float32),
        torch.tensor(y_train, dtype=torch.long),
        torch.tensor(x_val, dtype=torch.float32),
        torch.tensor(y_val, dtype=torch.long),
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
    model = setup.prepare_model(
        build_model(int(p["width"]), int(p["depth"]), float(p["dropout"])),
        checkpointing=checkpoint_hidden_layers,
    )
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
    group = _Group(members)
    while group.open:
        group.report_epoch(*group.train_epoch())


SOLO_PROBE_EPOCHS = 2
"""Epochs of the shape trained alone to measure its solo speed (the last one's is kept)."""


def solo_samples_per_sec(params: dict[str, Any], device: str) -> float:
    """What one trial of this shape measures alone on ``device``: the speed twin of a fused
    member. Measured once per shape and device in a worker (a few epochs of :func:`train`,
    with its meter), then cached."""
    shape = tuple((name, params.get(name)) for name in SHARED)
    key = (shape, device)
    if key not in _SOLO_SPEEDS:
        probe = {name: value for name, value in shape if value is not None}
        ctx = TrialContext.local(device=device)
        train({**probe, "epochs": SOLO_PROBE_EPOCHS}, ctx)
        _SOLO_SPEEDS[key] = float(ctx.history[-1].metrics["samples_per_sec"])
    return _SOLO_SPEEDS[key]


_SOLO_SPEEDS: dict[tuple[Any, str], float] = {}


class _Group:
    """A fused digits group: its model, optimizer, loss scale, data orders, open members."""

    def __init__(self, members: list[Member]) -> None:
        from hpsearch.torch.fused import FusedAdamW, FusedGradScaler, MemberBatches, fuse

        self.members = members
        resolved = [resolve_params(m.params) for m in members]
        first = resolved[0]
        for member, p in zip(members, resolved, strict=True):
            differs = [n for n in SHARED if p.get(n) != first.get(n)]
            if differs:
                trial = member.ctx.trial_number
                raise ValueError(f"trial {trial} differs from its group in {differs}")
        self.device = members[0].ctx.device
        precision = str(first.get("precision") or "fp32")
        if precision == "fp16" and self.device != "cuda":
            precision = "fp32"  # fp16 autocast needs CUDA, as configure() decides for one trial
        knobs = knobs_from_params(first)
        # Accumulation as one trial does it (TrainingSetup.backward): each micro-batch
        # weighted by its share of the effective batch, a partial window rescaled.
        self.accum, self.full = knobs.grad_accum_steps, knobs.effective_batch_size
        applied = {
            "batch_size": first["batch_size"],
            "precision": precision,
            "grad_accum_steps": self.accum,
            "effective_batch_size": self.full,
        }
        ignored = sorted(n for n in KNOB_NAMES & set(first) if n not in applied)
        for member in members:
            notes = [f"{n} is not applied in a fused group" for n in ignored]
            member.ctx.record_knobs(applied, notes)
        self.autocast = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        x_train, y_train, self.x_val, self.y_val = (t.to(self.device) for t in load_split())
        modules, self.streams, self.orders = [], [], []
        for member, p in zip(members, resolved, strict=True):
            seed = _params.seed_of(p, member.ctx)
            torch.manual_seed(seed)
            modules.append(build_model(int(p["width"]), int(p["depth"]), float(p["dropout"])))
            stream = torch.Generator()
            stream.set_state(torch.get_rng_state())  # where its global stream stands alone
            self.streams.append(stream)
            self.orders.append(torch.Generator().manual_seed(seed))
        self.model = fuse([m.to(self.device) for m in modules], generators=self.streams)
        self.optimizer = FusedAdamW(
            self.model.parameters(),
            len(members),
            lr=[float(p["lr"]) for p in resolved],
            weight_decay=[float(p["weight_decay"]) for p in resolved],
        )
        self.scaler = FusedGradScaler(len(members), enabled=precision == "fp16")
        self.batches = MemberBatches([x_train, y_train], int(first["batch_size"]), self.orders)
        self.epochs = int(first["epochs"])
        self.epoch = [self._resume(k) for k in range(len(members))]
        self.open = list(range(len(members)))  # indices into members, in the stack's order
        self.solo_samples_per_sec = solo_samples_per_sec(first, self.device)
        self.loss_fn = nn.CrossEntropyLoss(reduction="none")

    def _autocast(self) -> Any:
        return torch.autocast(self.device, dtype=self.autocast, enabled=self.autocast is not None)

    def train_epoch(self) -> tuple[list[float], int, float]:
        """One epoch of every open member: each one's mean training loss, the samples each
        trained on, and the seconds."""
        from hpsearch.torch.fused import member_losses

        self.model.train()
        began = time.perf_counter()
        totals = torch.zeros(len(self.open), device=self.device)
        seen = micro = window = 0
        self.optimizer.zero_grad()
        for inputs, targets in self.batches:
            samples = targets.shape[1]
            with self._autocast():
                losses = member_losses(self.loss_fn, self.model(inputs), targets)
            weighted = losses.float() * (samples / self.full)
            self.scaler.scale(weighted).backward()  # type: ignore[no-untyped-call]
            micro, window = micro + 1, window + samples
            if micro >= self.accum:
                self._step(window)
                micro = window = 0
            totals += losses.detach().float() * samples
            seen += samples
        if micro:  # a partly filled window at the epoch's end steps too
            self._step(window)
        return (totals / seen).tolist(), seen, time.perf_counter() - began

    def _step(self, window: int) -> None:
        """Step every open member on the gradient of the samples the window holds."""
        if window != self.full:
            with torch.no_grad():
                for param in self.model.parameters():
                    if param.grad is not None:
                        param.grad.mul_(self.full / window)
        if self.scaler.enabled:
            self.scaler.step(self.optimizer)
        else:
            self.optimizer.step()
        self.optimizer.zero_grad()

    def report_epoch(self, losses: list[float], seen: int, seconds: float) -> None:
        """Validate, checkpoint and report each open member; let those done or pruned leave."""
        from hpsearch.torch.fused import keep

        self.model.eval()
        with torch.no_grad(), self._autocast():
            outputs = self.model(self.x_val.expand(len(self.open), *self.x_val.shape))
            accuracy = (outputs.argmax(dim=-1) == self.y_val).float().mean(dim=1).tolist()
        staying = []
        for position, index in enumerate(self.open):
            member, step = self.members[index], self.epoch[index]
            self.epoch[index] = step + 1
            if not math.isfinite(losses[position]):
                member.prune(f"diverged at epoch {step} (train_loss {losses[position]})")
                continue
            member.ctx.save_checkpoint(self._state(position, index), step)
            member.ctx.report(
                step,
                val_accuracy=accuracy[position],
                train_loss=losses[position],
                epoch_seconds=seconds,
                # Its own samples over the group's wall time: its share of the group's speed;
                # the twin is what its configuration does alone (objectives read the twin).
                samples_per_sec=seen / seconds,
                samples_per_sec_solo=self.solo_samples_per_sec,
            )
            if member.ctx.should_prune():
                member.prune(f"pruned after epoch {step}")
            elif step + 1 >= self.epochs:
                member.complete()
            else:
                staying.append(position)
        if len(staying) < len(self.open):
            self.open = [self.open[p] for p in staying]
            if self.open:  # the model's dropout layers keep their members' streams themselves
                keep(staying, self.model, self.optimizer, self.scaler, self.batches)

    def _state(self, position: int, index: int) -> dict[str, Any]:
        """What a member's checkpoint holds: its model and optimizer state, its two streams."""
        model = self.model.member_state_dict(position)
        return {
            "model": {k: v.detach().cpu().clone() for k, v in model.items()},
            "fused_optimizer": self.optimizer.member_state(position),
            "order": self.orders[index].get_state(),
            "dropout": self.streams[index].get_state(),
        }

    def _resume(self, index: int) -> int:
        """Restore member ``index``'s checkpoint, if an interrupted run left one; its epoch."""
        saved = self.members[index].ctx.load_checkpoint()
        if saved is None:
            return 0
        state = saved.load()
        if "fused_optimizer" not in state:
            return 0  # a checkpoint of the trial run alone: it starts over, fused
        self.model.load_member_state_dict(index, state["model"])
        self.optimizer.load_member_state(index, state["fused_optimizer"])
        self.orders[index].set_state(state["order"])
        self.streams[index].set_state(state["dropout"])
        return int(saved.step) + 1
