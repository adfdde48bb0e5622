"""Moved to :mod:`hpsearch.adapters` (``hpsearch.Member``, ``hpsearch.fused``); this path is
kept for code that imports it from here."""

from hpsearch.adapters._members import SHARED_ATTRIBUTE, Member, fused, shared_of

__all__ = ["SHARED_ATTRIBUTE", "Member", "fused", "shared_of"]
