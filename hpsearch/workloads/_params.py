"""What every built-in workload does with its parameters, its seed and its checkpoints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Only the workloads that train need torch here: the simulated one never imports
    # it (a trial's worker would pay over a second of CPU for nothing).
    import torch
    from torch import nn

    from hpsearch.trial.context import TrialContext


def resolve_params(
    params: Mapping[str, Any],
    defaults: Mapping[str, Any],
    workload: str,
    *,
    knobs: bool = False,
) -> dict[str, Any]:
    """``params`` over ``defaults``; a name the workload does not read is an error.

    A typo in the config's ``space`` would otherwise be searched and silently ignored.
    With ``knobs``, the throughput knobs of :mod:`hpsearch.torch` are read too.
    """
    known = set(defaults)
    if knobs:
        from hpsearch.torch import KNOB_NAMES

        known |= KNOB_NAMES
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(
            f"the {workload} workload has no parameter(s) {unknown}; "
            f"its parameters are {sorted(defaults)}"
            + (" and the throughput knobs of hpsearch.torch.Knobs" if knobs else "")
        )
    return {**defaults, **params}


def seed_of(params: Mapping[str, Any], ctx: TrialContext) -> int:
    """The ``seed`` parameter when the space sets one, else the trial's seed (``ctx.seed``)."""
    seed = params.get("seed")
    return ctx.seed if seed is None else int(seed)


def resume(
    ctx: TrialContext, model: nn.Module, optimizer: torch.optim.Optimizer, order: torch.Generator
) -> int:
    """Restore the trial's last checkpoint, if an interrupted run left one; the epoch to start at.

    Args:
        ctx: the trial's context.
        model, optimizer: restored in place.
        order: the generator of the training data's order, restored too.
    """
    import torch

    saved = ctx.load_checkpoint()
    if saved is None:
        return 0
    state = saved.load()
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    order.set_state(state["order"])
    torch.set_rng_state(state["rng"])
    return saved.step + 1


def save_epoch(
    ctx: TrialContext,
    epoch: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    order: torch.Generator,
) -> None:
    """Checkpoint the end of ``epoch``: what :func:`resume` restores."""
    import torch

    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "order": order.get_state(),
        "rng": torch.get_rng_state(),
    }
    ctx.save_checkpoint(state, epoch)
