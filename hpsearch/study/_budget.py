"""The trial budget: which trials count toward ``n_trials``, and when the search stops."""

from __future__ import annotations

import enum
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from optuna.exceptions import ExperimentalWarning
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from hpsearch import attrs
from hpsearch.config import RunConfig, StudySpec
from hpsearch.samplers import grid_points


class BudgetDecision(enum.Enum):
    """Whether the search may start another trial."""

    START = "start"
    WAIT = "wait"
    FINISHED = "finished"


@dataclass(frozen=True)
class BudgetCount:
    """Trials that count toward ``n_trials``: those finished and those running."""

    finished: int
    running: int


def retried_numbers(trials: Sequence[FrozenTrial]) -> set[int]:
    """Numbers of failed trials that run again: interrupted ones, and those of a lost driver."""
    retried: set[int] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        for trial in trials:
            retried.update(_retries(trial))
    return retried


def _retries(trial: FrozenTrial) -> list[int]:
    """The failed trials ``trial`` runs again (call with Optuna's experimental warning off)."""
    found = list(RetryHeartbeatStaleTrialCallback.retry_history(trial))
    if attrs.RETRY_OF in trial.user_attrs:
        found.append(int(trial.user_attrs[attrs.RETRY_OF]))
    return found


class BudgetTally:
    """:func:`count_budget` kept across reads of a growing study.

    Finished trials never change, and a trial that re-runs another carries its
    mark from its creation, so the leading run of finished trials (by number) is
    counted once, into sets kept here; each count reads only the trials after it
    and compares them with those sets. Give it the study's trials sorted by
    number, as Optuna returns them.
    """

    def __init__(self) -> None:
        self._settled = 0  # trials[:_settled] are finished and counted below
        self._complete = 0
        self._pruned: set[int] = set()
        self._failed: set[int] = set()
        self._retried: set[int] = set()  # failed trials that some trial runs again
        self._alone: set[int] = set()  # pruned trials that some trial runs again alone
        self._uncounted = 0  # |pruned & alone| + |failed & retried|
        self.unfinished: list[FrozenTrial] = []
        """The trials still running or waiting, as of the last count."""

    def count(self, trials: Sequence[FrozenTrial]) -> BudgetCount:
        """The study's count now (see :func:`count_budget`)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            while self._settled < len(trials) and trials[self._settled].state.is_finished():
                self._settle(trials[self._settled])
                self._settled += 1
            tail = trials[self._settled :]
            retried = {n for t in tail for n in _retries(t)} - self._retried
        alone = {_alone_of(t) for t in tail} - {None} - self._alone
        states = [t.state for t in tail]
        pruned = {t.number for t in tail if t.state == TrialState.PRUNED}
        failed = {t.number for t in tail if t.state == TrialState.FAIL}
        uncounted = (
            self._uncounted
            + len(pruned & (self._alone | alone))
            + len(failed & (self._retried | retried))
            + len(self._pruned & alone)
            + len(self._failed & retried)
        )
        finished = (
            self._complete
            + states.count(TrialState.COMPLETE)
            + len(self._pruned)
            + len(pruned)
            + len(self._failed)
            + len(failed)
            - uncounted
        )
        self.unfinished = [t for t in tail if not t.state.is_finished()]
        return BudgetCount(finished=finished, running=states.count(TrialState.RUNNING))

    def _settle(self, trial: FrozenTrial) -> None:
        """Count a finished trial for good."""
        if trial.state == TrialState.COMPLETE:
            self._complete += 1
        elif trial.state == TrialState.PRUNED:
            self._pruned.add(trial.number)
            self._uncounted += trial.number in self._alone
        elif trial.state == TrialState.FAIL:
            self._failed.add(trial.number)
            self._uncounted += trial.number in self._retried
        for number in _retries(trial):
            if number not in self._retried:
                self._retried.add(number)
                self._uncounted += number in self._failed
        alone = _alone_of(trial)
        if alone is not None and alone not in self._alone:
            self._alone.add(alone)
            self._uncounted += alone in self._pruned


def _alone_of(trial: FrozenTrial) -> int | None:
    """The trial that ``trial`` re-runs alone on a whole GPU, if it does."""
    number = trial.user_attrs.get(attrs.ALONE_RETRY_OF)
    return int(number) if number is not None else None


def count_budget(trials: Sequence[FrozenTrial]) -> BudgetCount:
    """Count finished trials and running ones.

    Finished: complete, pruned (out-of-memory ones included), and failed; but not
    a trial that runs again: one failed by an interruption or lost with its
    driver, or one that ran out of memory under a shared GPU's cap and re-runs
    alone. Its re-run counts.
    """
    return BudgetTally().count(trials)


class TrialBudget:
    """When the search stops: ``n_trials`` finished in the study in total, or ``timeout`` passed.

    Like ``Study.optimize``, the timeout stops new trials from starting; trials
    already running finish, unless a grace is given: trials still running that
    long after the timeout are overdue, and the runner stops them. Failed trials
    count toward ``n_trials`` (as in ``Study.optimize``), except those interrupted
    by a stopped driver, which are enqueued again and counted once they finish.

    Args:
        n_trials: trials the study should reach, every run's included.
        timeout_s: seconds from now after which no trial starts.
        clock: the runner's clock.
        grace_s: seconds after the timeout at which running trials are stopped.
        grid: the points of the search's grid sampler, where it is one (they bound
            ``n_trials``, as Optuna's grid ends its study once each has run).
    """

    def __init__(
        self,
        n_trials: int | None,
        timeout_s: float | None,
        clock: Callable[[], float] = time.monotonic,
        grace_s: float | None = None,
        grid: int | None = None,
    ) -> None:
        self._n_trials = n_trials if grid is None else min(n_trials or grid, grid)
        self.grid = grid
        self._clock = clock
        self._timeout_s = timeout_s
        self._deadline = None if timeout_s is None else clock() + timeout_s
        self._grace_s = grace_s
        self._stopped = ""

    @classmethod
    def from_settings(
        cls, study: StudySpec, clock: Callable[[], float] = time.monotonic, grid: int | None = None
    ) -> TrialBudget:
        """The budget ``study`` sets, on the runner's ``clock``, bounded by a ``grid``."""
        return cls(study.n_trials, study.timeout, clock, study.timeout_grace, grid)

    @property
    def n_trials(self) -> int | None:
        """The trials the study reaches: ``study.n_trials``, or a smaller grid's points."""
        return self._n_trials

    @classmethod
    def of_search(
        cls, config: RunConfig, clock: Callable[[], float] = time.monotonic
    ) -> TrialBudget:
        """The budget of ``config``'s search: its ``study`` section's, a grid's size included."""
        grid = grid_points(config.study.sampler, config.search_space, config.source)
        return cls.from_settings(config.study, clock, grid)

    def stop(self, reason: str) -> None:
        """Start no more trials (those running finish): a trial asked (``study.stop()``).
        The first reason is kept."""
        self._stopped = self._stopped or reason

    @property
    def stopped(self) -> str:
        """Why the search was stopped before its budget (:meth:`stop`); empty: it was not."""
        return self._stopped

    def timed_out(self) -> bool:
        """Whether the wall-clock timeout has passed."""
        return self._deadline is not None and self._clock() >= self._deadline

    def overdue(self) -> bool:
        """Whether trials still running must be stopped now (the timeout and its grace passed)."""
        if self._deadline is None or self._grace_s is None:
            return False
        return self._clock() >= self._deadline + self._grace_s

    def overdue_line(self) -> str | None:
        """Why trials still open were stopped, once :meth:`overdue` (``None``: not overdue)."""
        if not self.overdue():
            return None
        return (
            f"stopped: still running {self._grace_s:g} s (study.timeout_grace) after "
            f"study.timeout ({self._timeout_s:g} s); it runs again on the next hpsearch run"
        )

    def short_of(self, count: BudgetCount) -> int:
        """How many finished trials ``count`` lacks of ``n_trials`` (0 without ``n_trials``)."""
        return 0 if self._n_trials is None else max(0, self._n_trials - count.finished)

    def room(self, count: BudgetCount) -> int | None:
        """How many more trials may start now (``None``: no ``n_trials``, no bound)."""
        if self._n_trials is None:
            return None
        return max(0, self._n_trials - count.finished - count.running)

    def decide(self, count: BudgetCount) -> BudgetDecision:
        """Start another trial, wait for running ones, or finish."""
        if self.timed_out() or self._stopped:
            return BudgetDecision.FINISHED
        if self._n_trials is None:
            return BudgetDecision.START
        if count.finished >= self._n_trials:
            return BudgetDecision.FINISHED
        if count.finished + count.running >= self._n_trials:
            return BudgetDecision.WAIT
        return BudgetDecision.START
