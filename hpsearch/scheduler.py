"""When the next trial starts, and with what: the budget, the resource policy, then Optuna's ask.

The runner asks :meth:`Scheduler.suggest` whenever a trial could start. A
trial is created only when the budget allows one and the policy admits it
*now*, so trials are created lazily, at launch, with the policy's current
answer in their spec. Ray-free: the Ray Tune runner wraps it in a Tune
searcher, the simulated runner calls it directly.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from optuna.trial import FrozenTrial, TrialState

from hpsearch.placement import Admission, ClusterCapacity, ResourcePolicy, RunningTrial
from hpsearch.study import BudgetCount, BudgetDecision, BudgetTally, TrialBudget
from hpsearch.trial.protocol import TrialLaunch

CAPACITY_REFRESH_S = 5.0
"""Seconds between reads of the cluster's resources (nodes may join or leave)."""
RECOUNT_S = 1.0
"""Seconds a count of the study's trials is reused while the budget is far from spent."""
RECOUNT_MARGIN = 16
"""Trials the budget must have left, beyond this driver's own since the count, to reuse it:
other drivers would have to start that many within :data:`RECOUNT_S` to be overrun."""


class Hold(enum.Enum):
    """Why :meth:`Scheduler.suggest` starts nothing now."""

    WAIT = "wait"
    """Not now: ask again when a trial ends (or a moment later)."""
    ELSEWHERE = "elsewhere"
    """Not now: the budget waits on trials running elsewhere only (another driver's,
    or a dead driver's until its heartbeat runs out and they are reclaimed), which end
    in wall time whatever this runner's clock says."""
    FINISHED = "finished"
    """The search is over: start nothing more."""

    @property
    def waits(self) -> bool:
        """Whether to ask again later (every hold but :attr:`FINISHED`)."""
        return self is not Hold.FINISHED


class TrialOpener(Protocol):
    """The ledger's side the scheduler uses."""

    def study_trials(self) -> list[FrozenTrial]:
        """Every trial of the study."""

    def trial_count(self) -> int | None:
        """How many trials the study holds, read in one statement (``None``: the study's
        storage cannot say it cheaply)."""

    def exclusive(self) -> AbstractContextManager[None]:
        """Held while the study's trials are counted and one is asked for (other drivers wait)."""

    def open(
        self,
        launch_id: str,
        admission: Admission,
        most: int | None = None,
    ) -> TrialLaunch | None:
        """Ask Optuna for a trial (or a fused group of at most ``most``); what the runner
        launches, or ``None`` when held back."""

    @property
    def waiting(self) -> int:
        """Trials asked for that wait for a whole GPU."""

    def open_waiting(self, launch_id: str, admission: Admission) -> TrialLaunch | None:
        """Launch the longest-waiting of those with ``admission`` (a whole GPU)."""


class RunningSource(Protocol):
    """The trials holding resources now (the packing feedback listener)."""

    def running(self) -> list[RunningTrial]:
        """Trials holding resources now."""


class Scheduler:
    """Decides, each time the runner asks, whether a trial starts and with what resources.

    Args:
        ledger: asks Optuna for the trial and keeps its records.
        running: the trials holding resources now.
        policy: decides whether another trial fits now, and with what.
        budget: decides whether the search may go on.
        capacity: the cluster's current resources (read every few seconds).
        runs_alone: whether the next trial Optuna hands out re-runs an OOM alone (given
            the study's trials still running or waiting).
        clock: for the capacity refresh.
    """

    def __init__(
        self,
        ledger: TrialOpener,
        *,
        running: RunningSource,
        policy: ResourcePolicy,
        budget: TrialBudget,
        capacity: Callable[[], ClusterCapacity],
        runs_alone: Callable[[Sequence[FrozenTrial]], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ledger = ledger
        self._running = running
        self._policy = policy
        self._budget = budget
        self._capacity_source = capacity
        self._runs_alone = runs_alone
        self._clock = clock
        self._capacity: ClusterCapacity | None = None
        self._capacity_at = 0.0
        self._tally = BudgetTally()
        self._counted: BudgetCount | None = None
        self._counted_at = -float("inf")
        self._opened_since = 0  # trials this driver opened since the study was counted
        self._total = 0  # the study's trials at that count

    def suggest(self, launch_id: str) -> TrialLaunch | Hold:
        """What the runner launches next under its id ``launch_id``, or why nothing now."""
        if self._budget.timed_out() or self._budget.stopped:
            return Hold.FINISHED
        running = self._running.running()
        capacity = self._current_capacity()
        if self._ledger.waiting:
            return self._launch_waiting(launch_id, running, capacity)
        # The policy answers from this driver's trials and its GPUs alone: asked before
        # the lock, a refusal (most calls, while trials fill every slot) costs no lock on
        # a shared store (two statements on PostgreSQL).
        admission = self._policy.admit(running, capacity)
        if admission is None:
            return Hold.WAIT
        # Held from reading the study's trials to asking Optuna for one: drivers
        # sharing the study must not both take its last trial.
        with self._ledger.exclusive():
            launch = self._open(launch_id, admission, running, capacity)
        if not isinstance(launch, Hold):
            self._opened_since += len(launch.members)
        return launch

    def _open(
        self,
        launch_id: str,
        admission: Admission,
        running: list[RunningTrial],
        capacity: ClusterCapacity,
    ) -> TrialLaunch | Hold:
        """The launch the study's count and budget allow ``admission`` now, or why none."""
        counted = self._count()
        alone = self._alone(admission, running, capacity)
        if alone is None:
            return Hold.WAIT
        decision = self._budget.decide(counted)
        if decision is BudgetDecision.FINISHED:
            return Hold.FINISHED
        if decision is BudgetDecision.WAIT:
            # Nothing of this driver's holds the budget: only trials elsewhere can end.
            return Hold.ELSEWHERE if counted.running and not running else Hold.WAIT
        # A fused group never takes more trials than the budget has left, nor more
        # than one GPU's share of those not finished: a GPU holding them all would
        # leave the others idle.
        room = self._budget.room(counted)
        if room is not None and capacity.gpus > 1:
            room = min(room, math.ceil((room + counted.running) / capacity.gpus))
        launch = self._ledger.open(launch_id, alone, room)
        # None: the suggestion was held back (predicted to run out, or to need a whole GPU).
        return Hold.WAIT if launch is None else launch

    def overdue(self) -> bool:
        """Whether trials still running must be stopped now (``study.timeout_grace`` passed)."""
        return self._budget.overdue()

    def _alone(
        self, admission: Admission, running: list[RunningTrial], capacity: ClusterCapacity
    ) -> Admission | None:
        """``admission``, or a whole GPU where the next trial must run alone (the study
        just counted says so)."""
        if admission.gpus > 0 and self._runs_alone(self._tally.unfinished):
            # A configuration that ran out of memory under a shared GPU's cap gets
            # one run on a whole GPU before it is judged infeasible.
            return self._policy.admit(running, capacity, whole_gpu=True)
        return admission

    def _count(self) -> BudgetCount:
        """The study's count: read (other drivers' trials count too), or that count with
        this driver's trials since, where it decides as a count read now would (reading a
        study of thousands of trials is most of a short trial's cost to the driver).

        That is where it was read within :data:`RECOUNT_S` with the budget far from
        spent, or, near its end, where the study holds no trial but those counted and
        this driver's since (one statement says so), none waiting, and the count leaves
        room: trials that ended since move from running to finished, which leaves the
        room as it was. Far from the end it is read again each :data:`RECOUNT_S`: each
        read fetches only the trials that changed since the last (Optuna's cache), so
        the last one does not fetch the whole study at once (10,000 trials: about 200 MB
        and seconds of the driver's CPU in the search's last trials).
        """
        now = self._clock()
        last = self._counted
        if last is not None:
            projected = BudgetCount(last.finished, last.running + self._opened_since)
            room = self._budget.room(projected)
            far = room is None or room > RECOUNT_MARGIN
            if far and now - self._counted_at < RECOUNT_S:
                return projected
            if not far and room is not None and room > 0 and self._only_ours_since():
                return projected
        # Only the trials after the leading finished ones are counted again.
        trials = self._ledger.study_trials()
        self._counted = self._tally.count(trials)
        self._counted_at, self._opened_since, self._total = now, 0, len(trials)
        return self._counted

    def _only_ours_since(self) -> bool:
        """Whether the study holds only the trials of the last count, none of them waiting
        then, and this driver's since: nobody else started or queued one."""
        if any(t.state is TrialState.WAITING for t in self._tally.unfinished):
            return False
        return self._ledger.trial_count() == self._total + self._opened_since

    def _launch_waiting(
        self, launch_id: str, running: list[RunningTrial], capacity: ClusterCapacity
    ) -> TrialLaunch | Hold:
        """A trial known to need more than a share goes first, alone on a whole GPU.

        Nothing new starts until a GPU is free for it: new trials would starve it.
        """
        whole = self._policy.admit(running, capacity, whole_gpu=True)
        launch = self._ledger.open_waiting(launch_id, whole) if whole is not None else None
        return Hold.WAIT if launch is None else launch

    def _current_capacity(self) -> ClusterCapacity:
        now = self._clock()
        if self._capacity is None or now - self._capacity_at > CAPACITY_REFRESH_S:
            self._capacity = self._capacity_source()
            self._capacity_at = now
        return self._capacity
