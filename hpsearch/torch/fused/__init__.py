"""Fused trials: K trials of one architecture trained as one model, each still its own trial.

Where one small model leaves a device idle (per-operator cost dominates, as for
an MLP of width 32 on a CPU core, or most models on a large GPU), K members with
different hyperparameters train K times the work for about the cost of one
(Wang et al., "Horizontally Fused Training Array", MLSys 2021).

* :func:`fuse` turns K initialised modules into one :class:`FusedModule` whose
  inputs and outputs carry a leading member axis ``[K, batch, ...]``.
* :class:`FusedLSTM`: K ``nn.LSTM`` layers, each member's sequences of their own
  lengths (``vmap`` cannot map ``nn.LSTM`` over packed sequences).
* :class:`FusedSGD`, :class:`FusedAdam` and :class:`FusedAdamW` step every
  member with its own learning rate, weight decay, momentum and betas;
  ``optimizer.member(k)`` is the optimizer an LR scheduler drives for member k.
* :class:`FusedGradScaler`: a loss scale per member; an inf in one member skips
  that member's step only.
* :class:`MemberBatches`: each member's own data order, as its ``DataLoader``
  would draw it.
* :func:`member_losses` and :func:`keep`: the per-member loss, and members
  leaving (pruned, finished, diverged) without disturbing the others.

A member trained fused ends with the parameters and loss curve it would have
alone, with the same seed, hyperparameters and batches (tested to 1e-5 relative
on CPU float32).
"""

from collections.abc import Callable, Sequence
from typing import Protocol

import torch

from hpsearch.torch.fused._data import MemberBatches
from hpsearch.torch.fused._layers import (
    FusedConv,
    FusedDropout,
    FusedLayerNorm,
    FusedLinear,
    FusedModule,
    FusedSequential,
    FusedVmap,
    Method,
    fuse,
)
from hpsearch.torch.fused._optim import (
    FusedAdam,
    FusedAdamW,
    FusedGradScaler,
    FusedOptimizer,
    FusedSGD,
)
from hpsearch.torch.fused._recurrent import FusedLSTM


def member_losses(
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    outputs: torch.Tensor,
    targets: torch.Tensor,
) -> torch.Tensor:
    """Each member's mean loss, ``[K]``, from ``[K, B, ...]`` outputs and targets.

    ``loss_fn`` is an unreduced loss (``reduction="none"``), as
    ``nn.CrossEntropyLoss(reduction="none")``.
    """
    k, batch = outputs.shape[0], outputs.shape[1]
    flat = loss_fn(
        outputs.reshape(k * batch, *outputs.shape[2:]),
        targets.reshape(k * batch, *targets.shape[2:]),
    )
    return flat.reshape(k, batch, -1).mean(dim=(1, 2))


class Selectable(Protocol):
    """Anything holding per-member state that members leave: a scaler, a data order."""

    def select(self, keep: Sequence[int]) -> None:
        """Keep only the members at positions ``keep`` (in that order)."""


def keep(
    members: Sequence[int],
    model: FusedModule,
    optimizer: FusedOptimizer | None = None,
    *others: Selectable,
) -> None:
    """Keep only ``members`` (positions, in order): the others leave the model, its optimizer,
    and any scaler, data order or other :class:`Selectable` passed.

    Call it between steps: the members left keep their parameters, optimizer
    state, loss scale and data order untouched, and the next step costs only theirs.
    """
    model.select(members)
    if optimizer is not None:
        optimizer.select(members, model.parameters())
    for part in others:
        part.select(members)


__all__ = [
    "FusedAdam",
    "FusedAdamW",
    "FusedConv",
    "FusedDropout",
    "FusedGradScaler",
    "FusedLSTM",
    "FusedLayerNorm",
    "FusedLinear",
    "FusedModule",
    "FusedOptimizer",
    "FusedSGD",
    "FusedSequential",
    "FusedVmap",
    "MemberBatches",
    "Method",
    "Selectable",
    "fuse",
    "keep",
    "member_losses",
]
