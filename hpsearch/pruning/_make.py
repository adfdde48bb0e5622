"""The judge a config's ``study.pruner`` asks for."""

from __future__ import annotations

from collections.abc import Sequence

import optuna

from hpsearch._options import construct_checked
from hpsearch.config import ObjectiveSpec, PrunerSpec
from hpsearch.pruning._base import PruneJudge
from hpsearch.pruning._dominated import DominatedJudge, DominatedRule
from hpsearch.pruning._optuna import OptunaJudge, PrimaryObjectiveJudge
from hpsearch.pruning._pruners import make_pruner


def check_pruner(spec: PrunerSpec, source: str = "<config>") -> None:
    """Build the pruner a config names, to report bad options before a search starts.

    Raises:
        ConfigError: an option the pruner does not take, or a value it rejects.
    """
    if spec.type == "dominated":
        construct_checked(DominatedRule, dict(spec.options), "study.pruner", source)
    else:
        make_pruner(spec, source)


def make_judge(
    spec: PrunerSpec,
    objectives: Sequence[ObjectiveSpec],
    study: optuna.Study,
    source: str = "<config>",
) -> PruneJudge | None:
    """The judge for a config's pruner; ``None`` when it sets none."""
    if spec.type == "none":
        return None
    if spec.type == "dominated":
        rule: DominatedRule = construct_checked(
            DominatedRule, dict(spec.options), "study.pruner", source
        )
        return DominatedJudge(objectives, rule, study)
    if len(objectives) == 1:
        return OptunaJudge(objectives[0], spec, study)
    return PrimaryObjectiveJudge(objectives, make_pruner(spec, source), spec, study)
