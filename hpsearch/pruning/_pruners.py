"""The Optuna pruners a ``study.pruner`` section names, and their table."""

from __future__ import annotations

import difflib
import typing
from collections.abc import Callable
from typing import Any

import optuna
from pydantic import ValidationError

from hpsearch._options import construct_checked
from hpsearch.config import PrunerSpec
from hpsearch.errors import ConfigError

_PRUNERS: dict[str, Callable[..., optuna.pruners.BasePruner]] = {
    "none": optuna.pruners.NopPruner,
    "median": optuna.pruners.MedianPruner,
    "percentile": optuna.pruners.PercentilePruner,
    "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
    "hyperband": optuna.pruners.HyperbandPruner,
    "threshold": optuna.pruners.ThresholdPruner,
    "wilcoxon": optuna.pruners.WilcoxonPruner,
    "patient": optuna.pruners.PatientPruner,
}

WRAPPED = "wrapped_pruner"
"""The option of ``patient`` that names the pruner it wraps (Optuna's argument)."""


def make_pruner(
    spec: PrunerSpec, source: str = "<config>", key: str = "study.pruner"
) -> optuna.pruners.BasePruner:
    """The Optuna pruner a ``study.pruner`` section (at ``key``) names, with its options.

    ``dominated`` is hpsearch's own rule (see :mod:`hpsearch.pruning`): the study
    gets Optuna's ``NopPruner``. ``patient`` builds the pruner it wraps from the
    section its ``wrapped_pruner`` option holds.
    """
    if spec.type == "dominated":
        return optuna.pruners.NopPruner()
    options = dict(spec.options)
    if spec.type == "patient":
        options[WRAPPED] = _wrapped(options.get(WRAPPED), source, f"{key}.options.{WRAPPED}")
    pruner: optuna.pruners.BasePruner = construct_checked(_PRUNERS[spec.type], options, key, source)
    return pruner


def pruner_name(spec: PrunerSpec) -> str:
    """The name of the Optuna class a section names (``NopPruner`` for ``dominated``)."""
    return getattr(_PRUNERS.get(spec.type), "__name__", "NopPruner")


def wrapped_spec(section: Any, source: str, key: str) -> PrunerSpec | None:
    """The section of the pruner a ``patient`` pruner wraps: ``{type: ..., options: ...}``
    or its type alone (``None``: none, patience alone decides).

    Raises:
        ConfigError: not a pruner section, or one Optuna's ``PatientPruner`` cannot wrap.
    """
    if section is None:
        return None
    example = "e.g. wrapped_pruner: {type: median, options: {n_warmup_steps: 2}}"
    try:
        spec = PrunerSpec.model_validate({"type": section} if isinstance(section, str) else section)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        problem, fix = f"not a pruner section: {first['msg']}", example
        if where == "type":
            names = typing.get_args(PrunerSpec.model_fields["type"].annotation)
            close = difflib.get_close_matches(str(first["input"]), names, n=1)
            problem = f"'{first['input']}' is not a pruner"
            fix = f"did you mean '{close[0]}'?" if close else f"use one of: {', '.join(names)}"
        raise ConfigError(source, f"{key}.{where}" if where else key, problem, fix) from None
    if spec.type == "dominated":
        raise ConfigError(
            source,
            key,
            "dominated is hpsearch's own rule, not an Optuna pruner that PatientPruner can wrap",
            f"wrap one of Optuna's pruners ({example}), or write pruner: {{type: dominated}}",
        )
    return spec


def _wrapped(section: Any, source: str, key: str) -> optuna.pruners.BasePruner | None:
    spec = wrapped_spec(section, source, key)
    return None if spec is None else make_pruner(spec, source, key)
