"""What every pruning rule is: a judge of each reported step, and where its verdicts go."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import optuna
from optuna.trial import TrialState

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
    """Keep objective values per step on the trial (Optuna keeps none with several objectives)."""
    stored = dict(trial.user_attrs.get(attrs.INTERMEDIATE, {}))
    stored[str(step)] = dict(values)
    trial.set_user_attr(attrs.INTERMEDIATE, stored)
