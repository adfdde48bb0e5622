"""The two objects through which Ray Tune drives hpsearch: a searcher and a callback.

:class:`AdmissionSearcher` is Tune's search algorithm. It creates a trial only
when the budget allows one and the resource policy admits it *now*, so trials
are created lazily, at launch, with the policy's current answer in their
config. :class:`RecorderCallback` forwards what happens to trials to the
:class:`~hpsearch.recorder.TrialRecorder`.

Neither keeps state worth saving: the Optuna study is the checkpoint. Tune
pickles both into its experiment folder, so both drop their live handles when
pickled (``__getstate__``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ray.tune import Callback
from ray.tune.experiment import Trial
from ray.tune.search import Searcher

from hpsearch.recorder import TrialRecorder
from hpsearch.resources import ClusterCapacity, ResourcePolicy
from hpsearch.study import BudgetDecision, TrialBudget, count_budget
from hpsearch.trial.protocol import WorkerEvent

_CAPACITY_REFRESH_S = 5.0


class AdmissionSearcher(Searcher):
    """Tune searcher over Optuna's ask, gated by the budget and the resource policy.

    Args:
        recorder: asks Optuna and keeps the records.
        policy: decides whether another trial fits now, and with what.
        budget: decides whether the search may go on.
        capacity: returns the cluster's current resources (refreshed every few seconds).
    """

    def __init__(
        self,
        recorder: TrialRecorder,
        policy: ResourcePolicy,
        budget: TrialBudget,
        capacity: Callable[[], ClusterCapacity],
    ) -> None:
        super().__init__()
        self._recorder: TrialRecorder | None = recorder
        self._policy = policy
        self._budget = budget
        self._capacity_source = capacity
        self._capacity: ClusterCapacity | None = None
        self._capacity_at = 0.0

    # Ray's annotation omits the documented Searcher.FINISHED string sentinel.
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:  # type: ignore[override]
        recorder = self._live_recorder()
        if self._budget.timed_out():
            return Searcher.FINISHED
        running = recorder.running()
        capacity = self._current_capacity()
        admission = self._policy.admit(running, capacity)
        if admission is None:
            return None
        trials = recorder.study_trials()  # read once for both questions below
        if admission.gpus > 0 and recorder.next_runs_alone(trials):
            # A configuration that ran out of memory under a shared GPU's cap gets
            # one run on a whole GPU before it is judged infeasible.
            admission = self._policy.admit(running, capacity, whole_gpu=True)
            if admission is None:
                return None
        decision = self._budget.decide(count_budget(trials))
        if decision is BudgetDecision.FINISHED:
            return Searcher.FINISHED
        if decision is BudgetDecision.WAIT:
            return None
        # None: the suggestion was predicted to run out of memory and recorded unlaunched.
        return recorder.open_trial(trial_id, admission)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        # Completion is recorded by RecorderCallback, which also gets Ray's error text.
        pass

    def save(self, checkpoint_path: str) -> None:
        # The Optuna study is the checkpoint; nothing to write.
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass

    def _current_capacity(self) -> ClusterCapacity:
        now = time.monotonic()
        if self._capacity is None or now - self._capacity_at > _CAPACITY_REFRESH_S:
            self._capacity = self._capacity_source()
            self._capacity_at = now
        return self._capacity

    def _live_recorder(self) -> TrialRecorder:
        if self._recorder is None:
            raise RuntimeError("AdmissionSearcher was unpickled; it only runs in its driver")
        return self._recorder

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_recorder=None, _capacity_source=None, _policy=None, _budget=None)
        return state


class RecorderCallback(Callback):
    """Forwards Tune's trial events to the recorder, and does its periodic upkeep."""

    def __init__(self, recorder: TrialRecorder) -> None:
        self._recorder: TrialRecorder | None = recorder

    def on_trial_start(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._live().trial_started(trial.trial_id)

    def on_trial_result(
        self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any], **info: Any
    ) -> None:
        event = WorkerEvent.from_result(result)
        if event is not None:
            self._live().trial_event(trial.trial_id, event)

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._live().trial_ended(trial.trial_id)

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        error = trial.get_error()
        self._live().trial_ended(trial.trial_id, crash=str(error) if error else "unknown error")

    def on_step_end(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        self._live().maintain()

    def _live(self) -> TrialRecorder:
        if self._recorder is None:
            raise RuntimeError("RecorderCallback was unpickled; it only runs in its driver")
        return self._recorder

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_recorder": None}
