"""The objects through which Ray Tune drives hpsearch: a searcher, a stopper and a callback.

:class:`SchedulerSearcher` is Tune's search algorithm over the
:class:`~hpsearch.scheduler.Scheduler`, so trials are created lazily, at
launch, with the policy's current answer in their config.
:class:`SearchStopper` ends the experiment when the scheduler says running
trials are overdue (``study.timeout_grace``), or when hpsearch's side failed.
:class:`LedgerCallback` forwards what happens to trials to the
:class:`~hpsearch.lifecycle.TrialLedger`. :class:`NewWorkersStart` is Tune's
trial scheduler: first in, first out, as Tune's own, but a trial waiting for
its new worker keeps it.

None keeps state worth saving: the Optuna study is the checkpoint. Tune
pickles them into its experiment folder, so they drop their live handles when
pickled (``__getstate__``).

An exception raised on hpsearch's side (a full disk under the stores, say) is
kept in a :class:`Failure`, not left to Tune, which would log it with its
traceback at each trial and go on. The experiment then stops, and the runner
raises the first one once Tune has stopped its trials.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import ray
from ray.tune import Callback, Stopper
from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler
from ray.tune.search import Searcher

from hpsearch._procs import descendants
from hpsearch.runner._base import TrialEvents, TrialSource
from hpsearch.runner._cluster import local_ray_lost
from hpsearch.runner._tune_dicts import event_of, tune_config
from hpsearch.scheduler import Hold
from hpsearch.trial.death import node_lost
from hpsearch.trial.protocol import TrialLaunch


class Failure:
    """The first exception hpsearch's side raised while Tune ran it; later ones follow from it."""

    def __init__(self) -> None:
        self.first: Exception | None = None
        self.lock = threading.RLock()
        """Held while Tune runs hpsearch's side: a thread that closes the search out
        without Tune (its Ray gone) waits for what runs there to finish."""

    @contextmanager
    def kept(self) -> Iterator[None]:
        """Keep an exception raised in the block (the first one) instead of raising it."""
        with self.lock:
            try:
                yield
            except Exception as exc:  # a KeyboardInterrupt still stops Tune as usual
                if self.first is None:
                    self.first = exc

    def raise_first(self) -> None:
        """Raise the kept exception, if any."""
        if self.first is not None:
            raise self.first

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its searcher, stopper and callbacks (with this) into its folder.
        return {"first": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.first = state["first"]
        self.lock = threading.RLock()


class SchedulerSearcher(Searcher):
    """Tune searcher whose suggestions are the scheduler's.

    Args:
        source: the scheduler.
        upkeep: the ledger's periodic upkeep (heartbeats, reclaiming a dead driver's
            trials), run before each answer to wait: with nothing running, Tune
            asks again every second for up to 600 s and runs no step (so no
            ``on_step_end``) meanwhile, and a dead driver's trials, which hold the
            budget, must still be reclaimed.
        failure: where an exception of the scheduler's is kept (the search then ends).
    """

    def __init__(
        self,
        source: TrialSource,
        upkeep: Callable[[], None] | None = None,
        failure: Failure | None = None,
    ) -> None:
        super().__init__()
        self._source: TrialSource | None = source
        self._upkeep = upkeep
        self._failure = failure or Failure()

    # Ray's annotation omits the documented Searcher.FINISHED string sentinel.
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:  # type: ignore[override]
        source = self._live()
        if self._failure.first is not None:
            return Searcher.FINISHED  # hpsearch's side failed: the search ends
        answer: TrialLaunch | Hold = Hold.FINISHED
        with self._failure.kept():
            answer = source.suggest(trial_id)
            if isinstance(answer, Hold) and answer.waits and self._upkeep is not None:
                self._upkeep()
                answer = source.suggest(trial_id)  # what upkeep reclaimed may run now
        if answer is Hold.FINISHED or self._failure.first is not None:
            return Searcher.FINISHED
        if isinstance(answer, Hold):
            return None
        return tune_config(answer)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        # Completion is recorded by LedgerCallback, which also gets Ray's error text.
        pass

    def save(self, checkpoint_path: str) -> None:
        # The Optuna study is the checkpoint; nothing to write.
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass

    def _live(self) -> TrialSource:
        if self._source is None:
            raise RuntimeError("SchedulerSearcher was unpickled; it only runs in its driver")
        return self._source

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_source": None, "_upkeep": None}


class NewWorkersStart(FIFOScheduler):
    """Tune's first-in-first-out scheduling, less its choice of the next trial to start.

    Tune starts the trial its scheduler chooses first, and FIFO's choice is the
    oldest pending trial: one whose new worker is still starting (a process, its
    imports, its CUDA context: seconds). Given a worker that just freed up, Tune
    hands it to that trial and stops the new worker. Where trials are shorter than
    a worker's start-up, every new worker is stopped so, and a GPU's trial count
    can never grow past the workers it has. Choosing none here, Tune hands a freed
    worker to a trial not yet waiting for one (the next one admitted) and lets the
    new workers start; every pending trial is still started, in order.
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        return None


class SearchStopper(Stopper):
    """Tune stopper that stops every running trial once the source says they are overdue,
    or once hpsearch's side failed.

    Tune asks :meth:`stop_all` after every step, reports or not, so a trial that
    hangs without reporting is stopped too. The trials stopped stay open in the
    ledger, which records them as interrupted when the search is closed out.
    """

    def __init__(self, source: TrialSource, failure: Failure | None = None) -> None:
        self._source: TrialSource | None = source
        self._failure = failure or Failure()

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False  # never one trial alone: only the whole search runs out of time

    def stop_all(self) -> bool:
        if self._failure.first is not None:
            return True
        overdue = False
        with self._failure.kept():
            overdue = self._source is not None and self._source.overdue()
        return overdue

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_source": None}


class LedgerCallback(Callback):
    """Forwards Tune's trial events to the ledger, and does its periodic upkeep.

    Args:
        events: the ledger.
        failure: where an exception of the ledger's is kept; once one is, nothing
            more is forwarded (what failed, a full disk say, would fail again).
    """

    def __init__(
        self,
        events: TrialEvents,
        failure: Failure | None = None,
        node_gone: Callable[[str], bool] | None = None,
    ) -> None:
        self._events: TrialEvents | None = events
        self._failure = failure or Failure()
        self._node_gone = node_gone or node_died
        self._nodes: dict[str, str] = {}  # trial id -> the node its worker said it runs on
        self._killed: set[str] = set()  # trial ids whose worker was killed past its limit
        self._pids: dict[str, int] = {}  # trial id -> its worker's process id

    def on_trial_start(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._tell(lambda events: events.started(trial.trial_id))

    def on_trial_result(
        self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any], **info: Any
    ) -> None:
        event = event_of(result)
        if event is not None:
            if event.assigned is not None and event.assigned.node_id:
                self._nodes[trial.trial_id] = event.assigned.node_id
                if event.assigned.pid is not None:
                    self._pids[trial.trial_id] = event.assigned.pid
            self._tell(lambda events: events.event(trial.trial_id, event))

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._nodes.pop(trial.trial_id, None)
        self._pids.pop(trial.trial_id, None)
        self._tell(lambda events: events.ended(trial.trial_id))

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        crash = _error_text(trial)
        node = self._nodes.pop(trial.trial_id, None)
        self._pids.pop(trial.trial_id, None)
        # Ray may report a lost node's actor as unreachable before it has marked the
        # node dead: the node's fate says which it was.
        unreachable = _UNREACHABLE.search(crash) is not None and not node_lost(crash)
        if node is not None and unreachable and self._node_gone(node):
            crash += f"\nits node {node[:12]} was dead by then (Ray's node table)"
        lost = local_ray_lost()
        if lost is not None:  # not the trial's doing: it runs again (the driver stops)
            crash += f"\nthe local Ray's node was dead by then (its {lost})"
        self._tell(lambda events: events.ended(trial.trial_id, crash=crash))

    def on_step_end(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        self._tell(lambda events: events.maintain())
        self._tell(lambda events: self._kill(events.unresponsive(), trials))

    def _kill(self, launches: list[str], trials: list[Trial]) -> None:
        """Kill the workers of ``launches`` from outside (stopped, or stuck holding the GIL):
        Ray ends the process; Tune then reports the trial's error, as for any dead worker.

        On the driver's own node, what the worker started (a command-mode script, its
        children) is killed first: a worker killed from outside cannot end them.
        """
        for trial in trials:
            actor = trial.temporary_state.ray_actor
            trial_id = trial.trial_id
            if trial_id in launches and actor is not None and trial_id not in self._killed:
                self._killed.add(trial_id)
                pid = self._pids.get(trial_id)
                if pid is not None and self._nodes.get(trial_id) == _this_node():
                    for child in descendants(pid):
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(child, signal.SIGKILL)
                ray.kill(actor, no_restart=True)

    def _tell(self, what: Callable[[TrialEvents], object]) -> None:
        events = self._live()
        if self._failure.first is not None:
            return
        with self._failure.kept():
            what(events)

    def _live(self) -> TrialEvents:
        if self._events is None:
            raise RuntimeError("LedgerCallback was unpickled; it only runs in its driver")
        return self._events

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_events": None}


def _this_node() -> str:
    """The Ray node id of the driver's machine."""
    return str(ray.get_runtime_context().get_node_id())


_UNREACHABLE = re.compile(r"ActorUnavailableError|actor is (?:temporarily )?unavailable|RpcError")
"""Ray's words for an actor it cannot reach: a dead worker, or a node that is gone."""
NODE_DEATH_WAIT_S = 20.0
"""How long Ray may take to mark a silent node dead (its default health check: 15 s)."""


def node_died(node_id: str, wait_s: float = NODE_DEATH_WAIT_S) -> bool:
    """Whether Ray marks node ``node_id`` dead within ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            entries = ray.nodes()  # type: ignore[no-untyped-call]
        except Exception:  # the cluster is going away: no word on the node
            return False
        found = [e for e in entries if e.get("NodeID") == node_id]
        if found and not found[0].get("Alive", True):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def _error_text(trial: Trial) -> str:
    """Ray's word on why the trial's worker failed.

    ``Trial.get_error`` reads it from Tune's storage, which is synced later; the
    trial's local error file already holds it.
    """
    error = trial.get_error()
    if error:
        return str(error)
    path = getattr(trial, "error_file", None)
    if path and os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as text:
            # Tune heads each failure with "Failure # N (occurred at ...)": not Ray's word.
            lines = [line for line in text.read().splitlines() if not line.startswith("Failure #")]
        return "\n".join(lines).strip() or "unknown error"
    return "unknown error"
