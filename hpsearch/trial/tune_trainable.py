"""Moved to :mod:`hpsearch.adapters`; this path is kept for code that imports it from here."""

from hpsearch.adapters._tune import nested, tune_train

__all__ = ["nested", "tune_train"]
