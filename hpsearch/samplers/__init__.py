"""Optuna's samplers by the name the config gives them (``study.sampler``): ``_make`` (the
sampler a config asks for, a grid from the space) and ``_ordered_tpe`` (TPE that knows a
categorical's numeric choices are ordered)."""

from typing import TYPE_CHECKING

from hpsearch._lazy import lazy_exports

if TYPE_CHECKING:
    from hpsearch.samplers._make import MOST_GRID_POINTS, grid_of, grid_points, make_sampler
    from hpsearch.samplers._ordered_tpe import (
        OrderedChoicesParzenEstimator,
        numeric_choices,
        order_numeric_choices,
    )

__getattr__, __dir__ = lazy_exports(__name__)

__all__ = [
    "MOST_GRID_POINTS",
    "OrderedChoicesParzenEstimator",
    "grid_of",
    "grid_points",
    "make_sampler",
    "numeric_choices",
    "order_numeric_choices",
]
