"""What a fused group holds of its GPU's memory: one context for its process, and each
member's own. Pure: the readings come in, shares of a GPU's usable memory come out."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

SHAPES_KEPT = 256
"""The recent shapes remembered (a search whose shapes rarely repeat would keep each)."""


class GroupMemory:
    """The memory fused groups of each shape were read to hold, as shares of usable memory.

    Groups of two member counts read give the line through them: what the group's
    process holds whatever its members (its CUDA context) and what each member adds.
    With one count read, the whole group over its members (the context counted in
    each member: the larger answer).
    """

    def __init__(self) -> None:
        self._held: dict[Hashable, dict[int, float]] = {}
        """Per shape and member count, the most of a GPU's usable memory a group held."""

    def read(self, shape: Hashable, members: int, share: float) -> None:
        """A group of ``members`` of ``shape`` was read holding ``share`` of usable memory."""
        held = self._held.setdefault(shape, {})
        held[members] = max(held.get(members, 0.0), share)
        forget_oldest(self._held, SHAPES_KEPT)

    def of(self, shape: Hashable) -> tuple[float, float] | None:
        """A member's share and its process's share for ``shape``; for a shape not read,
        the largest of those read (``None``: none read)."""
        known = self._line(shape)
        if known is not None or not self._held:
            return known
        costs = [c for other in self._held if (c := self._line(other)) is not None]
        return (max(c[0] for c in costs), max(c[1] for c in costs)) if costs else None

    def _line(self, shape: Hashable) -> tuple[float, float] | None:
        held = self._held.get(shape)
        if not held:
            return None
        counts = sorted(held)
        low, high = counts[0], counts[-1]
        if high > low:
            member = (held[high] - held[low]) / (high - low)
            process = held[low] - member * low
            if member > 0 and process >= 0:
                return member, process
        return max(held[c] / c for c in counts), 0.0


def forget_oldest(kept: dict[Hashable, Any], most: int) -> None:
    """Keep the ``most`` keys most recently added (a dict keeps their order)."""
    if len(kept) > most:
        del kept[next(iter(kept))]
