"""The Optuna pruners a ``study.pruner`` section names, and their table."""

from __future__ import annotations

from collections.abc import Callable

import optuna

from hpsearch._options import construct_checked
from hpsearch.config import PrunerSpec

_PRUNERS: dict[str, Callable[..., optuna.pruners.BasePruner]] = {
    "none": optuna.pruners.NopPruner,
    "median": optuna.pruners.MedianPruner,
    "percentile": optuna.pruners.PercentilePruner,
    "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
    "hyperband": optuna.pruners.HyperbandPruner,
    "threshold": optuna.pruners.ThresholdPruner,
    "wilcoxon": optuna.pruners.WilcoxonPruner,
}


def make_pruner(spec: PrunerSpec, source: str = "<config>") -> optuna.pruners.BasePruner:
    """The Optuna pruner a ``study.pruner`` section names, with its options.

    ``dominated`` is hpsearch's own rule (see :mod:`hpsearch.pruning`): the study
    gets Optuna's ``NopPruner``.
    """
    if spec.type == "dominated":
        return optuna.pruners.NopPruner()
    pruner: optuna.pruners.BasePruner = construct_checked(
        _PRUNERS[spec.type], dict(spec.options), "study.pruner", source
    )
    return pruner
