"""Optuna's own pruners as judges: one objective directly, several through the primary one."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from hpsearch.config import ObjectiveSpec, PrunerSpec
from hpsearch.pruning._base import KEEP, Verdict, store_intermediate, stored_intermediate
from hpsearch.pruning._pruners import WRAPPED, pruner_name, wrapped_spec
from hpsearch.telemetry import objective_reading


class OptunaJudge:
    """One objective: the study's own Optuna pruner on the objective metric."""

    def __init__(self, objective: ObjectiveSpec, spec: PrunerSpec, study: optuna.Study) -> None:
        self._objective = objective
        self._spec = spec
        self._study = study

    def judge(self, trial: optuna.Trial, step: int, metrics: Mapping[str, float]) -> Verdict:
        value = objective_reading(metrics, self._objective.metric)
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
        value = objective_reading(metrics, self._primary.metric)
        if value is None or not math.isfinite(value):
            return KEEP
        store_intermediate(trial, step, {self._primary.metric: value})
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
            step: values[self._primary.metric]
            for step, values in stored_intermediate(frozen).items()
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
    if spec.type == "patient":
        patience = int(spec.options.get("patience", 0))
        delta = float(spec.options.get("min_delta", 0.0))
        inner = wrapped_spec(spec.options.get(WRAPPED), "<config>", WRAPPED)
        around = f", and {pruner_name(inner)} agreed" if inner is not None else ""
        return (
            f"{metric}: its last {patience + 1} reports fell short of its best before "
            f"them{f' by more than {delta:g}' if delta else ''} ({name}, patience "
            f"{patience}{around})"
        )
    if spec.type == "threshold":
        low, high = spec.options.get("lower"), spec.options.get("upper")
        lower = f"{low:g}" if low is not None else "-inf"
        upper = f"{high:g}" if high is not None else "inf"
        return f"{metric} is outside [{lower}, {upper}] ({name})"
    return f"{metric}: {name} said to prune"
