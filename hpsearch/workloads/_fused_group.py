"""What every built-in workload's fused group does, whatever its model and data.

A group trains its members as one fused model (:mod:`hpsearch.torch.fused`), each
member its own trial: its own seed (initialisation, data order, dropout masks),
learning rate and weight decay (AdamW, as the workloads train alone), reports,
pruning, checkpoint and speed twin. A workload says how to build one member's
model, how to fuse them, what its batches are and how it validates
(:class:`FusedGroup`'s abstract methods); the group does the rest.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from hpsearch.adapters import Member
from hpsearch.torch import KNOB_NAMES, knobs_from_params
from hpsearch.torch.fused import (
    FusedAdamW,
    FusedGradScaler,
    FusedModule,
    keep,
    member_losses,
)
from hpsearch.trial.context import TrialContext
from hpsearch.workloads import _params

SOLO_PROBE_EPOCHS = 2
"""Epochs of the shape trained alone to measure its solo speed (the last one's is kept)."""


class MemberData(Protocol):
    """The group's training batches: each member's own, stacked along a leading axis."""

    def __iter__(self) -> Any: ...

    def select(self, keep: Sequence[int]) -> None: ...


def solo_samples_per_sec(
    train: Callable[[dict[str, Any], TrialContext], None],
    shared: Sequence[str],
    params: dict[str, Any],
    device: str,
) -> float:
    """What one trial of this shape measures alone on ``device``: the speed twin of a fused
    member. Measured once per training function, shape and device in a worker (a few
    epochs of ``train``, with its meter), then cached."""
    shape = tuple((name, params.get(name)) for name in shared)
    key = (f"{train.__module__}.{train.__qualname__}", shape, device)
    if key not in _SOLO_SPEEDS:
        probe = {name: value for name, value in shape if value is not None}
        ctx = TrialContext.local(device=device)
        train({**probe, "epochs": SOLO_PROBE_EPOCHS}, ctx)
        _SOLO_SPEEDS[key] = float(ctx.history[-1].metrics["samples_per_sec"])
    return _SOLO_SPEEDS[key]


_SOLO_SPEEDS: dict[tuple[str, Any, str], float] = {}


class FusedGroup(ABC):
    """A fused group of one workload: its model, optimizer, loss scale, data, open members.

    Args:
        members: the group's trials.
        resolve: the workload's parameters over its defaults.
        shared: what the members must agree on.
        train: the workload's one-trial function (measures the speed twin).
    """

    def __init__(
        self,
        members: list[Member],
        *,
        resolve: Callable[[dict[str, Any]], dict[str, Any]],
        shared: Sequence[str],
        train: Callable[[dict[str, Any], TrialContext], None],
    ) -> None:
        self.members = members
        self.resolved = [resolve(m.params) for m in members]
        first = self.resolved[0]
        for member, p in zip(members, self.resolved, strict=True):
            differs = [n for n in shared if p.get(n) != first.get(n)]
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
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        modules, self.streams, self.orders = [], [], []
        for member, p in zip(members, self.resolved, strict=True):
            seed = _params.seed_of(p, member.ctx)
            torch.manual_seed(seed)
            modules.append(self.build_member(p).to(self.device))
            stream = torch.Generator()
            stream.set_state(torch.get_rng_state())  # where its global stream stands alone
            self.streams.append(stream)
            self.orders.append(torch.Generator().manual_seed(seed))
        self.model = self.fuse_members(modules)
        self.optimizer = FusedAdamW(
            self.model.parameters(),
            len(members),
            lr=[float(p["lr"]) for p in self.resolved],
            weight_decay=[float(p["weight_decay"]) for p in self.resolved],
        )
        self.scaler = FusedGradScaler(len(members), enabled=precision == "fp16")
        self.data = self.member_data(first)
        self.epochs = int(first["epochs"])
        self.epoch = [self._resume(k) for k in range(len(members))]
        self.open = list(range(len(members)))  # indices into members, in the stack's order
        self.solo_samples_per_sec = solo_samples_per_sec(train, shared, first, self.device)
        self.loss_fn = nn.CrossEntropyLoss(reduction="none")

    @abstractmethod
    def build_member(self, params: dict[str, Any]) -> nn.Module:
        """One member's model, as the workload builds it alone (the member's seed is set)."""

    @abstractmethod
    def fuse_members(self, modules: list[nn.Module]) -> FusedModule:
        """The members' models as one (their dropout masks drawn from ``self.streams``)."""

    @abstractmethod
    def member_data(self, params: dict[str, Any]) -> MemberData:
        """The training batches: ``(inputs, targets)``, each member's in its data order
        (``self.orders``); ``inputs`` the fused model's input, or a tuple of its arguments."""

    @abstractmethod
    def validation_outputs(self) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        """The fused model's validation outputs ``[K, B, classes]`` and their labels ``[B]``,
        batch by batch (in eval mode, without gradients, under autocast)."""

    def run(self) -> None:
        """Train until every member has left (done, pruned or diverged)."""
        while self.open:
            self.report_epoch(*self.train_epoch())

    def autocast(self) -> Any:
        """The group's mixed precision (none under fp32)."""
        dtype = self.autocast_dtype
        return torch.autocast(self.device, dtype=dtype, enabled=dtype is not None)

    def train_epoch(self) -> tuple[list[float], int, float]:
        """One epoch of every open member: each one's mean training loss, the samples each
        trained on, and the seconds."""
        self.model.train()
        began = time.perf_counter()
        totals = torch.zeros(len(self.open), device=self.device)
        seen = micro = window = 0
        self.optimizer.zero_grad()
        for inputs, targets in self.data:
            samples = targets.shape[1]
            args = inputs if isinstance(inputs, tuple) else (inputs,)
            with self.autocast():
                losses = member_losses(self.loss_fn, self.model(*args), targets)
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

    def accuracy(self) -> list[float]:
        """Each open member's validation accuracy."""
        self.model.eval()
        correct = torch.zeros(len(self.open), device=self.device)
        total = 0
        with torch.no_grad(), self.autocast():
            for outputs, labels in self.validation_outputs():
                correct += (outputs.argmax(dim=-1) == labels).sum(dim=1).float()
                total += labels.shape[-1]
        return (correct / total).tolist()

    def report_epoch(self, losses: list[float], seen: int, seconds: float) -> None:
        """Validate, checkpoint and report each open member; let those done or pruned leave."""
        accuracy = self.accuracy()
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
                keep(staying, self.model, self.optimizer, self.scaler, self.data)

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
