"""How many members a fused group gets: as many as raise the group's measured throughput.

A pure policy, as ``_packing.py`` is: it takes the aggregate samples/s measured
at 1, 2, 4, ... members (and the memory each count used) and answers with a
count and its reason. Fusion pays where one model leaves its device idle; where
one model already keeps it busy, doubling the members buys nothing, and the
answer stays one member: the trial runs unfused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hpsearch.placement._capacity import MIN_GAIN


@dataclass(frozen=True)
class FusionReading:
    """What a group of ``members`` measured over a few steps."""

    members: int
    samples_per_sec: float
    """Aggregate: all members' samples per second."""
    memory_mb: float | None = None
    """Peak memory of the group (``None``: not measured)."""


@dataclass(frozen=True)
class FusionChoice:
    """A member count and why."""

    members: int
    reason: str
    gain: float
    """Aggregate samples/s at ``members`` ÷ at one member."""


def choose_members(
    readings: Sequence[FusionReading],
    *,
    max_members: int,
    memory_limit_mb: float | None = None,
) -> FusionChoice:
    """The member count to run, from readings at growing counts (one of them at 1 member).

    Counts are taken in order while each fits ``max_members``, stays under
    ``memory_limit_mb`` and raises the throughput of the last kept count as
    packing asks of a trial more on a GPU: :data:`MIN_GAIN` for each member added.
    """
    ordered = sorted(readings, key=lambda r: r.members)
    if not ordered or ordered[0].members != 1:
        raise ValueError("choose_members needs a reading at one member")
    base = kept = ordered[0]
    reason = "one member: no larger group measured"
    for reading in ordered[1:]:
        if reading.members > max_members:
            reason = f"{kept.members} member(s): fusion.max_members is {max_members}"
            break
        if memory_limit_mb is not None and (reading.memory_mb or 0.0) > memory_limit_mb:
            reason = (
                f"{kept.members} member(s): {reading.members} would need "
                f"{reading.memory_mb:.0f} MiB of {memory_limit_mb:.0f}"
            )
            break
        gain = reading.samples_per_sec / kept.samples_per_sec
        min_gain = (1 + MIN_GAIN) ** (reading.members - kept.members)
        if gain < min_gain:
            reason = (
                f"{kept.members} member(s): {reading.members} measured {gain:.2f}x the "
                f"throughput of {kept.members} (needs {min_gain:.2f}x)"
            )
            break
        kept = reading
        gain = kept.samples_per_sec / base.samples_per_sec
        reason = f"{kept.members} member(s): {gain:.2f}x one member's throughput"
    return FusionChoice(kept.members, reason, kept.samples_per_sec / base.samples_per_sec)
