"""How many members a fused group gets: as many as raise the group's measured throughput.

A pure policy, as ``_packing.py`` is: it takes the aggregate samples/s measured
at 1, 2, 4, ... members (and the memory each count used) and answers with a
count and its reason. Fusion pays where one model leaves its device idle; where
one model already keeps it busy, doubling the members buys nothing, and the
answer stays one member: the trial runs unfused. What packing measures of a
group's GPU process (its share of utilisation and memory) sizes the next group
by packing's own arithmetic (:func:`~hpsearch.placement.fit`), so the count
jumps to what fits rather than one doubling per measured group.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from hpsearch.placement._capacity import MIN_GAIN, fit
from hpsearch.placement._group_memory import SHAPES_KEPT, GroupMemory, forget_oldest
from hpsearch.placement._views import TrialProfile
from hpsearch.placement.settings import FusionSpec, PackingSpec

GROUPS_KEPT = 256
"""The recent groups whose size the sizer remembers, for the evidence that comes after them."""


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


class FusionSizer:
    """How many members the next fused group of each shape gets.

    Per shape (the shared parameters' values). With ``grow`` (``fusion.mode:
    auto``), groups start at two members; a group that ends says what its
    members measured together (the aggregate of their ``samples_per_sec``) and
    what one of them does alone (their solo twin). The next group of that shape
    doubles while each doubling pays (by :func:`choose_members`); a count that
    measured short of the best below it is backed off by halves towards it, and
    the shape settles where the doubling stops paying, at one member (unfused)
    where fusion never did.

    On a GPU its last samples show nearly empty (packing's roomy GPU, and busy half
    of ``target_util`` at most: :meth:`~hpsearch.placement.PackingPolicy.roomy`), the
    next group doubles the largest of its shape those samples have read, as packing
    doubles its trials there (:meth:`members_within`, ``room_seen_at``): a first wave
    of groups grows 2, 4, 8, ... while the GPU has room, rather than every process
    packing starts in the first seconds holding two members until a group has
    reported. A doubling rests on a group whose own process the samples have
    read (:meth:`holds`), so launches before those samples never double twice;
    counts measured short and settled shapes are left to the throughput.

    The evidence packing gathers sizes groups too (:meth:`evidence`): a group's
    GPU process measured at ``u``% and ``m`` MiB asks about ``u / n``% and
    ``m / n`` MiB a member, so the members that fit (:func:`fit`, packing's one
    arithmetic) are known from one group's samples. The next group of its shape
    (and of a shape not seen yet) jumps to the largest doubling that fits,
    rather than one doubling per measured group, and the measured throughput
    still judges it. The memory bound caps the shape as an OOM does.

    Without ``grow`` (``fixed``), every group starts at ``max_members``. Either
    way, a group that ran out of memory caps its shape below its size. Each
    change is a decision with its reason.

    A group is one process among those packing places on its GPU, and gets the
    share of the GPU's memory its launch is admitted with. Where the evidence
    says what a member asks of the memory, a group holds no more members than fit
    in that share (:meth:`members_within`); groups of two sizes read tell a
    member's own memory from the context their process holds whatever its
    members (the line through them), so an eighth of an 80 GB card holds the
    members it fits, not those it would fit were each to carry a context. Sized
    by the whole GPU, groups doubled
    to 16 while packing, from the profiles of smaller groups, still placed eight
    processes, and the GPU ran out of memory.

    Args:
        max_members: the most members a group holds (``fusion.max_members``, or
            ``fusion.members`` when fixed).
        grow: measure and double (``auto``), or hold ``max_members`` (``fixed``).
        clock: Unix time, for the decisions' timestamps.
        packing: the ``packing`` section whose target and headroom the evidence is
            fitted with (``None``: packing's defaults).
    """

    def __init__(
        self,
        max_members: int,
        *,
        grow: bool = True,
        clock: Callable[[], float] = time.time,
        packing: PackingSpec | None = None,
    ) -> None:
        self._max = max_members
        self._grow = grow
        self._caps: dict[Hashable, int] = {}
        self._clock = clock
        self._packing = packing or PackingSpec()
        self._readings: dict[Hashable, dict[int, FusionReading]] = {}
        self._next: dict[Hashable, int] = {}
        self._settled: dict[Hashable, int] = {}
        self._groups: dict[int, tuple[Hashable, int]] = {}
        self._memory = GroupMemory()
        self._share_caps: set[tuple[Hashable, int]] = set()
        self._read_groups: dict[Hashable, int] = {}
        """Per shape, the largest group whose process its GPU's samples have read."""
        self._start = min(2, max_members)
        """Where a shape not measured yet starts: two, or what the evidence fits."""
        self.decisions: list[dict[str, object]] = []
        """Every decision, in order: the shape, the member count and why."""

    @classmethod
    def from_settings(
        cls,
        fusion: FusionSpec,
        clock: Callable[[], float] = time.time,
        packing: PackingSpec | None = None,
    ) -> FusionSizer:
        """The sizer ``fusion`` asks for: measured and doubled (``auto``), or ``members`` each."""
        auto = fusion.mode == "auto"
        return cls(
            fusion.max_members if auto else fusion.members, grow=auto, clock=clock, packing=packing
        )

    def members(self, shape: Hashable) -> int:
        """The member count of the next group of ``shape``."""
        if shape in self._settled:
            wanted = self._settled[shape]
        elif not self._grow:
            wanted = self._max
        else:
            wanted = self._next.get(shape, self._start)
        return min(wanted, self._caps.get(shape, wanted))

    def members_within(
        self, shape: Hashable, share: float, room_seen_at: float | None = None
    ) -> int:
        """The member count of the next group of ``shape``, in a launch admitted with
        ``share`` of its GPU: no more members than that share of the memory holds, by
        what a member of the shape (or, not measured yet, of any shape) was measured
        to ask.

        ``room_seen_at``: when the GPU's latest sample showed it nearly empty
        (``None``: it did not); the group may then double the largest of its shape
        whose process the samples have read.
        """
        wanted = max(self.members(shape), self._roomy(shape, room_seen_at))
        known = self._memory.of(shape)
        if wanted < 2 or known is None or not 0 < share < 1:
            return wanted
        member, process = known
        cap = max(1, math.floor((share - process) / member))
        if cap >= wanted:
            return wanted
        if (shape, cap) not in self._share_caps:
            self._share_caps.add((shape, cap))
            self._record(
                shape,
                cap,
                f"{cap} member(s) in a launch of {share:.0%} of its GPU: a member asks "
                f"{member:.1%} of its usable memory"
                + (f", the group's process {process:.1%}" if process > 0 else ""),
            )
        return cap

    def launched(self, number: int, shape: Hashable, members: int) -> None:
        """A group of ``members`` of ``shape`` started, its first trial ``number``: the
        evidence its GPU process gives is about that many members."""
        if members > 1:
            self._groups[number] = (shape, members)
            if len(self._groups) > GROUPS_KEPT:
                del self._groups[next(iter(self._groups))]  # the oldest: long measured

    def evidence(self, number: int, profile: TrialProfile, memory_total_mb: float | None) -> None:
        """What the GPU process of the launch led by trial ``number`` was measured to ask
        (its utilisation share and memory, as packing measures a trial's), on a GPU of
        ``memory_total_mb``."""
        group = self._groups.get(number)
        if group is None or not self._grow or profile.utilization_pct <= 0:
            return
        shape, members = group
        memory = profile.memory_mb / members if profile.memory_mb else None
        fitted = fit(
            profile.utilization_pct / members,
            memory,
            memory_total_mb,
            most=self._max,
            target_util_pct=self._packing.target_util,
            memory_headroom=self._packing.memory_headroom,
        )

        def said() -> str:  # only for a decision: the evidence comes at every admission
            arithmetic = "; ".join(fitted.arithmetic(profile.utilization_pct / members, memory))
            return (
                f"a group of {members} measured {profile.utilization_pct:.1f}% of its GPU"
                + (f" and {profile.memory_mb:.0f} MiB" if profile.memory_mb else "")
                + f"; a member: {arithmetic}"
            )

        if profile.memory_mb and fitted.usable_memory_mb:
            self._memory.read(shape, members, profile.memory_mb / fitted.usable_memory_mb)
        if fitted.by_memory is not None and fitted.by_memory < self._caps.get(shape, self._max):
            self._caps[shape] = fitted.by_memory
            self._record(shape, fitted.by_memory, f"at most {fitted.by_memory}: {said()}")
        jump = _doubling_at_most(fitted.trials)
        # A shape not measured yet is likely of the same kind: it starts there.
        self._start = max(self._start, jump)
        if shape in self._settled or jump <= max(members, self._next.get(shape, 0)):
            return
        if any(c <= jump for c in self._short(shape)):
            return  # measured already, short of what it needed: the throughput decides
        self._next[shape] = jump
        self._record(shape, jump, f"trying {jump}: {said()}")

    def holds(self, number: int, memory_mb: float, memory_total_mb: float | None) -> None:
        """The process of the launch led by trial ``number`` holds ``memory_mb`` on a GPU of
        ``memory_total_mb``: what a member of its shape asks of the memory, read from a
        group's first samples, before its first report (groups launched in the first
        seconds are then capped by their share, :meth:`members_within`)."""
        group = self._groups.get(number)
        if group is None or not self._grow or not memory_total_mb:
            return
        shape, members = group
        self._memory.read(
            shape, members, memory_mb / (memory_total_mb * (1 - self._packing.memory_headroom))
        )
        self._read_groups[shape] = max(members, self._read_groups.get(shape, 0))
        forget_oldest(self._read_groups, SHAPES_KEPT)

    def ran_out(self, shape: Hashable, members: int) -> None:
        """A group of ``members`` of ``shape`` ran out of memory: later ones hold fewer."""
        cap = max(1, members // 2)
        if cap < self._caps.get(shape, members):
            self._caps[shape] = cap
            self._record(shape, cap, f"a group of {members} ran out of memory: at most {cap}")

    def measured(
        self, shape: Hashable, members: int, samples_per_sec: float | None, solo: float | None
    ) -> None:
        """A group of ``members`` of ``shape`` ended, its members' aggregate speed measured."""
        if shape in self._settled or members < 2 or not self._grow:
            return
        if samples_per_sec is None or solo is None or solo <= 0:
            self._decide(shape, 1, "the members reported no samples_per_sec and solo twin")
            return
        readings = self._readings.setdefault(shape, {1: FusionReading(1, solo)})
        readings[members] = FusionReading(members, samples_per_sec)
        choice = choose_members(list(readings.values()), max_members=self._max)
        short = self._short(shape)
        if short:
            # A count measured short: back off by halves towards the best below it,
            # down to where the next doubling was measured not to pay.
            halved = min(short) // 2
            if halved > choice.members and halved not in readings:
                self._next[shape] = halved
                self._record(shape, halved, f"backing off to {halved}: {choice.reason}")
            else:
                self._decide(shape, choice.members, choice.reason)
        elif members * 2 > self._max:
            self._decide(shape, choice.members, choice.reason)
        elif members * 2 > self._next.get(shape, 0):
            self._next[shape] = members * 2
            self._record(shape, members * 2, f"trying {members * 2}: {choice.reason}")

    def _roomy(self, shape: Hashable, seen_at: float | None) -> int:
        """The doubling a nearly empty GPU allows ``shape`` now (0: none), recorded when it
        raises the shape's next count."""
        read = self._read_groups.get(shape)
        if seen_at is None or read is None or not self._grow or shape in self._settled:
            return 0
        doubled = min(2 * read, self._max, self._caps.get(shape, self._max))
        if doubled <= self.members(shape) or any(c <= doubled for c in self._short(shape)):
            return 0  # nothing gained, or measured already: the throughput decides
        self._next[shape] = doubled
        self._record(
            shape,
            doubled,
            f"trying {doubled}: a group of {read} runs on a GPU its latest samples show "
            "nearly empty",
        )
        return doubled

    def _short(self, shape: Hashable) -> list[int]:
        """The counts of ``shape`` measured and not kept: past the best the doubling reached."""
        readings = self._readings.get(shape)
        if not readings:
            return []
        kept = choose_members(list(readings.values()), max_members=self._max).members
        return [c for c in readings if c > kept]

    def _decide(self, shape: Hashable, members: int, reason: str) -> None:
        self._settled[shape] = members
        self._record(shape, members, f"settled: {reason}")

    def _record(self, shape: Hashable, members: int, reason: str) -> None:
        self.decisions.append(
            {
                "time": round(self._clock(), 3),
                "shape": repr(shape),
                "members": members,
                "reason": reason,
            }
        )


def _doubling_at_most(count: int) -> int:
    """The largest power of two up to ``count`` (the ramp's levels: 1, 2, 4, 8, ...)."""
    return 1 << (max(1, count).bit_length() - 1)
