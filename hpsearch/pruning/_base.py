"""What every pruning rule is: a judge of each reported step, and where its verdicts go."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpsearch import attrs


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


class VerdictBoard(Protocol):
    """Where verdicts for ``ctx.should_prune()`` are posted, for the trial's worker to read.

    Attributes:
        name: how a worker finds the board (empty: the worker is handed verdicts directly).
    """

    name: str

    def post(self, number: int, step: int, prune: bool) -> None:
        """Post the verdict for one step of trial ``number``."""

    def forget(self, number: int) -> None:
        """Drop a finished trial's verdicts."""

    def close(self) -> None:
        """Remove the board at the end of the search."""


def store_intermediate(trial: optuna.Trial, step: int, values: Mapping[str, float]) -> None:
    """Keep objective values per step on the trial (Optuna keeps none with several objectives).

    One user attribute per step (``hpsearch.intermediate.<step>``), so a report
    writes one row, not the trial's whole history again. The first value is
    also the trial's Optuna intermediate value at that step (``Trial.report``
    refuses several objectives; the storage does not), for Optuna's own views:
    ``plot_intermediate_values``, optuna-dashboard.
    """
    trial.set_user_attr(f"{attrs.INTERMEDIATE}.{step}", dict(values))
    first = next(iter(values.values()), None)
    if first is not None:
        storage = trial.storage
        study_id = _study_id(storage, trial.study.study_name)
        # Cached by Optuna's storage once asked: no read per report.
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
        storage.set_trial_intermediate_value(trial_id, step, first)


@functools.lru_cache(maxsize=8)
def _study_id(storage: optuna.storages.BaseStorage, name: str) -> int:
    """A study's id in its storage: one query per study, not one per report."""
    return storage.get_study_id_from_name(name)


def stored_intermediate(trial: FrozenTrial) -> dict[int, dict[str, float]]:
    """The objective values per step :func:`store_intermediate` kept on ``trial``.

    Reads studies written before values were kept one step per attribute too.
    """
    steps: dict[int, dict[str, float]] = {
        int(step): dict(values)
        for step, values in (trial.user_attrs.get(attrs.INTERMEDIATE) or {}).items()
    }
    prefix = f"{attrs.INTERMEDIATE}."
    for key, values in trial.user_attrs.items():
        if key.startswith(prefix) and values is not None:
            steps[int(key.removeprefix(prefix))] = dict(values)
    return steps


def forget_intermediate(trial: optuna.Trial, inherited: Mapping[str, Any]) -> None:
    """A retry of a lost trial inherits its attributes; its steps start again."""
    for key in inherited:
        if key == attrs.INTERMEDIATE or key.startswith(f"{attrs.INTERMEDIATE}."):
            trial.set_user_attr(key, None)
