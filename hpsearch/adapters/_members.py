"""Fused trials as a training function sees them: the members, each with its params and context.

A function that trains several trials at once (``fusion.train``) takes one
argument, the list of :class:`Member`\\ s, and declares the parameters its
members must share with :func:`fused`::

    @hpsearch.fused(shared=("width", "depth", "batch_size"))
    def train_members(members: list[hpsearch.Member]) -> None:
        ...  # hpsearch.torch.fused: one model for all; member.ctx.report(...) per member

Each member is its own trial: it reports through its own ``ctx``, asks its own
``ctx.should_prune()``, and ends on its own: :meth:`Member.prune`,
:meth:`Member.fail` or :meth:`Member.complete` while the others go on. A member
still open when the function returns completes; if the function raises, every
open member fails with its traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hpsearch.oom import OomReport
from hpsearch.trial.context import TrialContext, as_metric_value
from hpsearch.trial.protocol import Outcome

SHARED_ATTRIBUTE = "hpsearch_shared"
"""Where :func:`fused` records a members function's shared parameters."""

F = TypeVar("F", bound=Callable[..., Any])


def fused(*, shared: Sequence[str]) -> Callable[[F], F]:
    """Mark a function as training fused members, sharing ``shared`` parameters.

    The shared parameters are those that change a tensor's shape or the data
    pipeline (sizes, batch size, DataLoader workers, precision, compile...): a
    group's members are asked of Optuna with them fixed to the first member's.
    """
    names = tuple(shared)

    def mark(function: F) -> F:
        setattr(function, SHARED_ATTRIBUTE, names)
        return function

    return mark


def shared_of(function: Callable[..., Any]) -> tuple[str, ...] | None:
    """The shared parameters a members function declares (``None``: none declared)."""
    declared = getattr(function, SHARED_ATTRIBUTE, None)
    return None if declared is None else tuple(declared)


@dataclass
class Member:
    """One trial of a fused group.

    Attributes:
        params: its parameters (the shared ones equal across the group).
        ctx: its context: report, ask whether to prune, checkpoint, its seed.
        outcome: how it ended (``None`` while it trains).
        reason: why it was pruned, or the error that failed it.
        final: the metrics it completed with.
        fused_oom_at: the size of the group that ran out of memory before it was split
            off into a smaller one (``None``: none did).
        oom: set when it ran out of memory alone (it ends pruned, charged as a trial is).
    """

    params: dict[str, Any]
    ctx: TrialContext
    outcome: Outcome | None = None
    reason: str = ""
    final: dict[str, float] = field(default_factory=dict)
    fused_oom_at: int | None = None
    oom: OomReport | None = None

    @property
    def active(self) -> bool:
        """Whether it still trains."""
        return self.outcome is None

    def prune(self, reason: str = "") -> None:
        """End it pruned (its own ``should_prune()`` said so, or it diverged)."""
        self._end(Outcome.PRUNED, reason)

    def fail(self, error: str) -> None:
        """End it failed, with ``error`` as its recorded error."""
        self._end(Outcome.FAIL, error)

    def complete(self, **metrics: Any) -> None:
        """End it complete, with final ``metrics`` (as a training function's returned dict)."""
        self.final = {name: as_metric_value(name, value) for name, value in metrics.items()}
        self._end(Outcome.COMPLETE, "")

    def _end(self, outcome: Outcome, reason: str) -> None:
        if self.outcome is None:
            self.outcome, self.reason = outcome, reason
