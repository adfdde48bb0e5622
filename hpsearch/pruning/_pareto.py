"""Pareto dominance between objective vectors (the front, the dominated pruning rule, the view)."""

from __future__ import annotations

from collections.abc import Sequence


def dominates(
    a: Sequence[float], b: Sequence[float], directions: Sequence[str] | None = None
) -> bool:
    """Whether ``a`` is at least as good as ``b`` on every objective and better on one.

    ``directions`` (``maximize``/``minimize`` per objective) default to maximising all.
    """
    signs = [1.0 if d == "maximize" else -1.0 for d in directions or ["maximize"] * len(a)]
    pairs = [(s * x, s * y) for s, x, y in zip(signs, a, b, strict=True)]
    return all(x >= y for x, y in pairs) and any(x > y for x, y in pairs)
