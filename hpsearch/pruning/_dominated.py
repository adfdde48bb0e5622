"""The dominated rule: prune a trial that other trials beat on every objective at the same step."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from hpsearch.config import ObjectiveSpec
from hpsearch.pruning._base import KEEP, Verdict, store_intermediate, stored_intermediate
from hpsearch.pruning._pareto import dominates
from hpsearch.telemetry import objective_reading


@dataclass(frozen=True)
class DominatedRule:
    """Options of ``pruner: {type: dominated}``.

    Attributes:
        n_startup_trials: no pruning until this many trials have finished.
        n_warmup_steps: no pruning before this step.
        min_dominating: prune once this many other trials dominate at the same step.
    """

    n_startup_trials: int = 4
    n_warmup_steps: int = 0
    min_dominating: int = 1

    def __post_init__(self) -> None:
        for name in ("n_startup_trials", "n_warmup_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.min_dominating < 1:
            raise ValueError("min_dominating must be >= 1")


class DominatedJudge:
    """Prune a trial that other trials beat on every objective at the same step."""

    def __init__(
        self, objectives: Sequence[ObjectiveSpec], rule: DominatedRule, study: optuna.Study
    ) -> None:
        self._objectives = list(objectives)
        self._directions = [o.direction for o in objectives]
        self._rule = rule
        self._history: dict[int, dict[int, tuple[float, ...]]] = {}
        self._finished = 0
        for frozen in study.get_trials(deepcopy=False):
            for step, metrics in stored_intermediate(frozen).items():
                vector = self._vector(metrics)
                if vector is not None:
                    self._history.setdefault(frozen.number, {})[step] = vector
            if frozen.state.is_finished():
                self._finished += 1

    def judge(self, trial: optuna.Trial, step: int, metrics: Mapping[str, float]) -> Verdict:
        vector = self._vector(metrics)
        if vector is None:
            return KEEP
        store_intermediate(
            trial, step, {o.metric: v for o, v in zip(self._objectives, vector, strict=True)}
        )
        self._history.setdefault(trial.number, {})[step] = vector
        if self._finished < self._rule.n_startup_trials or step < self._rule.n_warmup_steps:
            return KEEP
        better = [
            (number, steps[step])
            for number, steps in sorted(self._history.items())
            if number != trial.number
            and step in steps
            and dominates(steps[step], vector, self._directions)
        ]
        if len(better) < self._rule.min_dominating:
            return KEEP
        number, other = better[0]
        comparison = ", ".join(
            f"{o.metric} {b:.4g} vs {v:.4g}"
            for o, b, v in zip(self._objectives, other, vector, strict=True)
        )
        return Verdict(
            True,
            f"dominated at step {step} by {len(better)} trial(s) on every objective "
            f"(rule min_dominating={self._rule.min_dominating}); e.g. trial {number}: "
            f"{comparison}",
        )

    def finished(self, trial: optuna.Trial, state: TrialState, values: Sequence[float]) -> None:
        self._finished += 1

    def _vector(self, metrics: Mapping[str, Any]) -> tuple[float, ...] | None:
        values = [objective_reading(metrics, o.metric) for o in self._objectives]
        if any(v is None or not math.isfinite(v) for v in values):
            return None
        return tuple(float(v) for v in values if v is not None)
