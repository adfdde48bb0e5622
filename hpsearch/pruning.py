"""Early stopping of trials: each reported step is judged in the driver, with a reason.

Ray's ``OptunaSearch`` never asks an Optuna pruner; hpsearch does, for every
step a trial reports (the verdict reaches the worker through
``ctx.should_prune()``). Three rules:

* one objective, an Optuna pruner (median, percentile, successive halving,
  hyperband): Optuna's own ``Trial.report``/``should_prune``;
* several objectives, an Optuna pruner: Optuna's pruners judge one value per
  step (``Trial.report`` refuses multi-objective studies), so the pruner judges
  the **primary** objective (the first listed), in a shadow single-objective
  study that mirrors this search's intermediate values;
* ``type: dominated`` (any number of objectives): a trial is pruned at a step
  when at least ``min_dominating`` other trials, at the same step, were at least
  as good on every objective and better on one.

Every verdict to prune comes with a sentence saying why, which the recorder
puts on the Optuna trial and the MLflow run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from hpsearch import attrs
from hpsearch.config import ObjectiveSpec, PrunerSpec
from hpsearch.pareto import dominates

OPTUNA_PRUNERS = ("median", "percentile", "successive_halving", "hyperband")


@dataclass(frozen=True)
class Verdict:
    """Whether to stop a trial after a step, and why."""

    prune: bool
    reason: str = ""


KEEP = Verdict(False)


class PruneJudge(Protocol):
    """Judges each reported step of a trial."""

    def judge(self, trial: optuna.Trial, step: int, metrics: Mapping[str, float]) -> Verdict:
        """The verdict for ``step``, given the metrics reported at it."""

    def finished(self, trial: optuna.Trial, state: TrialState, values: Sequence[float]) -> None:
        """The trial ended (complete values, or pruned/failed with none)."""


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


def check_pruner(spec: PrunerSpec, source: str = "<config>") -> None:
    """Build the pruner a config names, to report bad options before a search starts.

    Raises:
        ConfigError: an option the pruner does not take, or a value it rejects.
    """
    from hpsearch.study import construct_checked, make_pruner

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
    from hpsearch.study import construct_checked, make_pruner

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


class OptunaJudge:
    """One objective: the study's own Optuna pruner on the objective metric."""

    def __init__(self, objective: ObjectiveSpec, spec: PrunerSpec, study: optuna.Study) -> None:
        self._objective = objective
        self._spec = spec
        self._study = study

    def judge(self, trial: optuna.Trial, step: int, metrics: Mapping[str, float]) -> Verdict:
        value = metrics.get(self._objective.metric)
        if value is None or not math.isfinite(value):
            return KEEP
        trial.report(value, step)
        if not trial.should_prune():
            return KEEP
        return Verdict(
            True,
            explain(self._spec, self._objective, self._study, trial=trial, step=step, value=value),
        )

    def finished(self, trial: optuna.Trial, state: TrialState, values: Sequence[float]) -> None:
        pass  # the study itself holds what the pruner needs


class PrimaryObjectiveJudge:
    """Several objectives, an Optuna pruner: the pruner judges the first objective.

    A shadow in-memory study with that one direction holds each trial's
    intermediate values of the primary metric (Optuna keeps none for
    multi-objective studies); they are also stored on the real trial
    (``hpsearch.intermediate``) so a resumed search rebuilds the shadow.
    """

    def __init__(
        self,
        objectives: Sequence[ObjectiveSpec],
        pruner: optuna.pruners.BasePruner,
        spec: PrunerSpec,
        study: optuna.Study,
    ) -> None:
        self._primary = objectives[0]
        self._spec = spec
        self._shadow = optuna.create_study(direction=self._primary.direction, pruner=pruner)
        self._mirror: dict[int, optuna.Trial] = {}
        for frozen in study.get_trials(deepcopy=False):
            self._replay(frozen)

    def judge(self, trial: optuna.Trial, step: int, metrics: Mapping[str, float]) -> Verdict:
        value = metrics.get(self._primary.metric)
        if value is None or not math.isfinite(value):
            return KEEP
        _store_intermediate(trial, step, {self._primary.metric: value})
        mirror = self._mirror.get(trial.number)
        if mirror is None:
            mirror = self._mirror[trial.number] = self._shadow.ask()
        mirror.report(value, step)
        if not mirror.should_prune():
            return KEEP
        why = explain(self._spec, self._primary, self._shadow, trial=mirror, step=step, value=value)
        return Verdict(True, f"primary objective {self._primary.metric}: {why}")

    def finished(self, trial: optuna.Trial, state: TrialState, values: Sequence[float]) -> None:
        mirror = self._mirror.pop(trial.number, None)
        if mirror is None:
            return
        if state is TrialState.COMPLETE and values:
            self._shadow.tell(mirror, values[0])
        else:  # pruned, or failed (which the pruners leave out, as in the real study)
            failed = state is TrialState.FAIL
            self._shadow.tell(mirror, state=TrialState.FAIL if failed else TrialState.PRUNED)

    def _replay(self, frozen: FrozenTrial) -> None:
        steps = {
            int(step): values[self._primary.metric]
            for step, values in frozen.user_attrs.get(attrs.INTERMEDIATE, {}).items()
            if self._primary.metric in values
        }
        if not steps or frozen.state not in (TrialState.COMPLETE, TrialState.PRUNED):
            return
        value = frozen.values[0] if frozen.state is TrialState.COMPLETE and frozen.values else None
        self._shadow.add_trial(
            optuna.trial.create_trial(
                state=frozen.state,
                value=value,
                params={},
                distributions={},
                intermediate_values=steps,
            )
        )


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
            stored = frozen.user_attrs.get(attrs.INTERMEDIATE, {})
            for step, metrics in stored.items():
                vector = self._vector(metrics)
                if vector is not None:
                    self._history.setdefault(frozen.number, {})[int(step)] = vector
            if frozen.state.is_finished():
                self._finished += 1

    def judge(self, trial: optuna.Trial, step: int, metrics: Mapping[str, float]) -> Verdict:
        vector = self._vector(metrics)
        if vector is None:
            return KEEP
        _store_intermediate(
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
        values = [metrics.get(o.metric) for o in self._objectives]
        if any(v is None or not math.isfinite(v) for v in values):
            return None
        return tuple(float(v) for v in values if v is not None)


def explain(
    spec: PrunerSpec,
    objective: ObjectiveSpec,
    study: optuna.Study,
    *,
    trial: optuna.Trial,
    step: int,
    value: float,
) -> str:
    """A sentence saying why an Optuna pruner stopped ``trial`` at ``step``."""
    name = type(study.pruner).__name__
    metric = f"{objective.metric} {value:.4g} at step {step}"
    if spec.type in ("median", "percentile"):
        q = 50.0 if spec.type == "median" else float(spec.options.get("percentile", 50.0))
        others = [
            t.intermediate_values[step]
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if step in t.intermediate_values and t.number != trial.number
        ]
        finite = [v for v in others if math.isfinite(v)]
        if finite:
            maximize = objective.direction == "maximize"
            bar = float(np.percentile(finite, 100 - q if maximize else q))
            side = "below" if maximize else "above"
            share = (
                "median"
                if spec.type == "median"
                else f"{100 - q if maximize else q:g}th percentile"
            )
            return (
                f"{metric} (best so far) is {side} the {share} {bar:.4g} of "
                f"{len(finite)} completed trial(s) at that step ({name})"
            )
    if spec.type in ("successive_halving", "hyperband"):
        factor = spec.options.get("reduction_factor", 4 if spec.type == "successive_halving" else 3)
        return (
            f"{metric} is not in the top 1/{factor} of the trials that reached this rung ({name})"
        )
    return f"{metric}: {name} said to prune"


def _store_intermediate(trial: optuna.Trial, step: int, values: Mapping[str, float]) -> None:
    """Keep objective values per step on the trial (Optuna keeps none with several objectives)."""
    stored = dict(trial.user_attrs.get(attrs.INTERMEDIATE, {}))
    stored[str(step)] = dict(values)
    trial.set_user_attr(attrs.INTERMEDIATE, stored)
