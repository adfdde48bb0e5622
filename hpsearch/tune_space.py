"""Moved to :mod:`hpsearch.adapters.tune_space`; this path is kept for code that imports it
from here."""

from hpsearch.adapters.tune_space import TuneSpaceError, converted, space_from_tune

__all__ = ["TuneSpaceError", "converted", "space_from_tune"]
