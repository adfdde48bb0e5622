"""What the workloads' tests share."""

from __future__ import annotations

from typing import Any

from hpsearch.adapters import Member
from hpsearch.trial.context import LocalTrialContext


def member_history(member: Member) -> list[Any]:
    """The reports of a fused member whose context is a local one."""
    ctx = member.ctx
    assert isinstance(ctx, LocalTrialContext)
    return ctx.history
