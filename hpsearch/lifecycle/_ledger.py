"""The trial ledger: the open-trial table and Optuna's ask and tell, with events for listeners.

The runner tells the ledger what happens to trials (started, a worker event,
ended); the ledger keeps Optuna, the single source of truth, in step, and
hands each change to its listeners as a typed event (see
:mod:`hpsearch.lifecycle._events`). Everything else a search records (MLflow,
GPU series, out-of-memory verdicts, packing feedback, the progress view, the
parent run) is a listener the composition root subscribes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import optuna

from hpsearch.lifecycle._asking import TrialAsker, fuse
from hpsearch.lifecycle._base import TrialListener
from hpsearch.lifecycle._deadline import stopped_late, to_kill
from hpsearch.lifecycle._events import (
    Ending,
    GpuLoadDeclared,
    KnobsReported,
    Opening,
    TrialOutOfMemory,
    TrialPlaced,
)
from hpsearch.lifecycle._launches import Launches
from hpsearch.lifecycle._objectives import ObjectiveValues
from hpsearch.lifecycle._records import OpenTrial, worker_died
from hpsearch.lifecycle._reports import Reports
from hpsearch.lifecycle._tell import StudyWrites
from hpsearch.lifecycle._upkeep import Upkeep
from hpsearch.placement import Admission
from hpsearch.pruning import PruneJudge
from hpsearch.space import SearchSpace
from hpsearch.study import StudyHandle
from hpsearch.trial.protocol import (
    Assignment,
    EventKind,
    Outcome,
    TrialLaunch,
    WorkerEvent,
)

STOPPED_EARLY = "the search stopped before train returned"
"""Why a trial still open when its search stopped was interrupted, unless told otherwise."""


class TrialLedger:
    """Owns the open trials and Optuna's ask/tell; tells its listeners what happens.

    The runner names what it launched by its own id (one launch runs one trial,
    or several fused); the ledger keeps each trial by its Optuna number.

    Args:
        handle: the study.
        space: the search space, to ask Optuna for parameters.
        objectives: reads a completed trial's objective values.
        launches: builds each trial's launch (the settings every trial shares).
        judge: judges each reported step for pruning (``None``: no pruner).
        listeners: told of every event, in this order.
        clock: Unix time (the runner's: virtual in a simulated search).
    """

    def __init__(
        self,
        handle: StudyHandle,
        *,
        space: SearchSpace,
        objectives: ObjectiveValues,
        launches: Launches,
        judge: PruneJudge | None = None,
        listeners: Sequence[TrialListener] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._handle = handle
        self._space = space
        self._objectives = objectives
        self._launches = launches
        self._judge = judge
        # An Optuna objective's trials write to the study from their workers.
        sole_writer = launches.settings.study_access is None
        self._writes = StudyWrites(handle, judge, sole_writer=sole_writer)
        self._listeners = list(listeners)
        self._clock = clock
        self._limit_s = launches.settings.timeout_s  # execution.trial_timeout
        self._open: dict[int, OpenTrial] = {}
        self._launched: dict[str, tuple[int, ...]] = {}  # the runner's id: its trials
        self._waiting: list[OpenTrial] = []
        self._asker = TrialAsker(handle, space, launches)
        self.finished = 0
        """Trials this ledger ended complete, pruned or failed (not interrupted)."""
        self._upkeep = Upkeep(handle, self._each)
        self._reports = Reports(objectives, judge, self._each, clock)

    # -- asked by the scheduler ---------------------------------------------------

    def study_trials(self) -> list[optuna.trial.FrozenTrial]:
        """Every trial of the study, from storage (other drivers' included)."""
        return self._handle.study.get_trials(deepcopy=False)

    def trial_count(self) -> int | None:
        """How many trials the study holds, other drivers' included, in one statement
        (``None``: not known that cheaply)."""
        return self._handle.trial_count()

    def exclusive(self) -> AbstractContextManager[None]:
        """Held while the study's trials are counted and one is asked for (other drivers wait)."""
        return self._handle.exclusive()

    def open(
        self, launch_id: str, admission: Admission, most: int | None = None
    ) -> TrialLaunch | None:
        """Ask Optuna for a new trial, or a fused group of at most ``most`` (``TrialAsker``);
        what the runner launches. ``None`` when a listener held every suggestion back: it
        needs at least the memory of one that ran out (recorded as pruned, not launched),
        or more than its share (it waits for a whole GPU: :meth:`open_waiting`)."""
        return self._launch(launch_id, self._asker.ask(admission, most))

    @property
    def waiting(self) -> int:
        """Trials asked for that wait for a whole GPU."""
        return len(self._waiting)

    def open_waiting(self, launch_id: str, admission: Admission) -> TrialLaunch | None:
        """Launch the longest-waiting trial that needs a whole GPU, with ``admission``."""
        record = self._waiting.pop(0)
        record.admission = admission
        return self._launch(launch_id, [record])

    def _launch(self, launch_id: str, records: list[OpenTrial]) -> TrialLaunch | None:
        """Record the trials' resources; launch those no listener holds back, as one launch."""
        kept = [record for record in records if self._admitted(record)]
        if not kept:
            return None
        fuse(kept)
        self._open.update((record.number, record) for record in kept)
        for opened in [record.opened() for record in kept]:
            self._each(lambda listener: listener.on_opened(opened))  # noqa: B023 - called at once
        self._launched[launch_id] = tuple(record.number for record in kept)
        return self._launches.launch([r.member(self._launches) for r in kept], kept[0].admission)

    def _admitted(self, record: OpenTrial) -> bool:
        """Whether the trial launches now; else it waits for a whole GPU or ends, pruned."""
        admission, trial = record.admission, record.trial
        opening = Opening(record.number, trial, record.sampled, admission)
        self._each(lambda listener: listener.on_opening(opening))
        waits = bool(opening.whole_gpu_reason) and 0 < admission.gpus < 1
        if waits:
            record.waited_for_whole_gpu = opening.whole_gpu_reason
        # A new trial's seed and checkpoints go with its resources (its re-runs inherit them).
        seed = None if record.inherits_seed else record.seed
        self._writes.admitted(trial, record.resources(), seed, record.checkpoint_dir)
        if waits:
            self._waiting.append(record)
            return False
        if opening.skip_reason:
            ending = self._ending(record, Outcome.PRUNED)
            ending.prune_reason, ending.oom = opening.skip_reason, opening.skip_oom
            self._finish(record, ending)
            return False
        return True

    # -- told by the runner ---------------------------------------------------------

    def started(self, launch_id: str) -> None:
        """The launch's worker started."""
        for record in [r for r in self._records(launch_id) if r.started_at is None]:
            record.started_at = self._clock()
            self._announce(record)

    def event(self, launch_id: str, event: WorkerEvent) -> None:
        """A report, a declaration or the end event from one of the launch's trials."""
        record = self._record(launch_id, event.member)
        if record is None:
            return
        placed = event.assigned if record.assigned is None else None
        in_effect = event.knobs if event.kind is EventKind.KNOBS else None
        if placed is not None or in_effect is not None:
            self._writes.worker_said(record.trial, placed, in_effect)
        if placed is not None:
            self._placed(record, placed)
        if event.kind is EventKind.GPU_LOAD and event.gpu_load is not None:
            loaded = GpuLoadDeclared(record.number, event.gpu_load)
            self._each(lambda listener: listener.on_gpu_load(loaded))
        elif event.kind is EventKind.KNOBS and event.knobs is not None:
            self._announce(record)
            knobs = KnobsReported(record.number, event.knobs)
            self._each(lambda listener: listener.on_knobs(knobs))
        elif event.kind is EventKind.END:
            record.end = event
        elif event.kind is EventKind.REPORT and event.step is not None:
            self._announce(record)
            sharing = record.sharing(self._open.values())
            self._reports.reported(record, event.step, event.metrics, sharing)
            self._asker.reported(self._records(launch_id))

    def ended(self, launch_id: str, crash: str | None = None) -> Outcome | None:
        """The runner is done with a launch: finish its trials in Optuna, tell the listeners.

        Args:
            launch_id: the runner's id of the launch.
            crash: the runner's error when the worker died without an end event.

        Returns:
            How its (first) trial ended; ``None`` for a launch this ledger does not hold.
        """
        outcomes = self._close(launch_id, crash, STOPPED_EARLY)
        return outcomes[0] if outcomes else None

    def _close(self, launch_id: str, crash: str | None, interrupted: str) -> list[Outcome]:
        """End a launch's trials; ``interrupted``: why, when one ends without an outcome."""
        outcomes = []
        failed: Exception | None = None
        numbers = self._launched.pop(launch_id, ())
        self._asker.ended([self._open[n] for n in numbers if n in self._open])
        for number in numbers:
            record = self._open.pop(number)
            end = record.end
            if end is not None and end.outcome is not None:
                # What train returns measures the whole trial (a rate over all of it).
                whole = record.started_at
                record.metrics.update(self._reports.measured(record, end.metrics, since=whole))
                self._objectives.note_targets(record.metrics, record.reached)
                ending = self._ending(record, end.outcome, end.error)
                ending.report = end.end
            elif crash is not None:
                died = worker_died(record, crash, self._launches.settings, self._clock())
                ending = self._ending(record, died.outcome, died.error)
                ending.crash = died.evidence
            elif late := stopped_late(
                record.started_at, record.last_step, self._limit_s, self._clock()
            ):
                ending = self._ending(record, Outcome.FAIL, late)  # timed out: not run again
            else:
                ending = self._ending(record, Outcome.INTERRUPTED, interrupted)
            try:
                outcomes.append(self._finish(record, ending))
            except Exception as exc:  # the study's store failed: the launch's others still end
                failed = failed or exc
        if failed is not None:
            raise failed
        return outcomes

    def interrupt_open(self, reason: str | None = None) -> int:
        """End every trial still open when the search stops; return how many were interrupted.

        A trial whose worker already sent its end event keeps its outcome; the
        others are interrupted for ``reason`` (and run again on the next run).
        """
        why = reason or STOPPED_EARLY
        outcomes: list[Outcome] = []
        failed: Exception | None = None
        for launch in list(self._launched):
            try:
                outcomes += self._close(launch, None, why)
            except Exception as exc:  # the study's store failed: every other run still ends
                failed = failed or exc
        if failed is not None:
            raise failed
        held = self._asker.held
        while self._waiting or held:  # asked for, never launched: they run again
            record = (self._waiting or held).pop(0)
            reason = "the search stopped while it waited for a whole GPU"
            outcomes.append(self._finish(record, self._ending(record, Outcome.INTERRUPTED, reason)))
        return outcomes.count(Outcome.INTERRUPTED)

    def unresponsive(self) -> list[str]:
        """Launches the runner kills from outside (``_deadline.to_kill``)."""
        started = {launch: self._open[n[0]].started_at for launch, n in self._launched.items()}
        return to_kill(started, self._limit_s, self._clock())

    def maintain(self, now: float | None = None) -> None:
        """Periodic upkeep (:class:`~hpsearch.lifecycle._upkeep.Upkeep`), on the wall clock."""
        self._upkeep.run([r.trial for r in [*self._open.values(), *self._waiting]], now)

    # -- internals -----------------------------------------------------------------

    def _records(self, launch_id: str) -> list[OpenTrial]:
        return [self._open[n] for n in self._launched.get(launch_id, ())]

    def _record(self, launch_id: str, number: int | None) -> OpenTrial | None:
        """The launch's trial ``number`` (``None``: its only trial)."""
        numbers = self._launched.get(launch_id, ())
        if number is None:
            return self._open[numbers[0]] if len(numbers) == 1 else None
        return self._open[number] if number in numbers else None

    def _each(self, tell: Callable[[TrialListener], None]) -> None:
        for listener in self._listeners:
            tell(listener)

    def _announce(self, record: OpenTrial) -> None:
        """Tell listeners the trial started, once, before anything else about it."""
        if record.announced:
            return
        record.announced = True
        started = record.started(self._clock())
        self._each(lambda listener: listener.on_started(started))

    def _placed(self, record: OpenTrial, assigned: Assignment) -> None:
        record.assigned = assigned  # on the study with the event's other news (event)
        self._announce(record)
        started_at = record.started_at if record.started_at is not None else self._clock()
        placed = TrialPlaced(record.number, assigned, started_at)
        self._each(lambda listener: listener.on_placed(placed))

    def _ending(self, record: OpenTrial, outcome: Outcome, error: str = "") -> Ending:
        return record.ending(
            outcome, error, co_tenants=max(0, record.sharing(self._open.values()) - 1)
        )

    def _finish(self, record: OpenTrial, ending: Ending) -> Outcome:
        values: tuple[float, ...] | None = None
        if ending.outcome is Outcome.COMPLETE:
            unread = record.end.end.unread if record.end and record.end.end else ()
            values, problem = self._objectives.values(record.metrics, record.reached, unread)
            if problem:
                ending.outcome, ending.error = Outcome.FAIL, problem
        self._announce(record)
        self._each(lambda listener: listener.on_ending(ending))
        outcome = ending.outcome
        duration = self._clock() - record.started_at if record.started_at is not None else 0.0
        try:
            prune_reason = self._writes.ended(
                ending, values=values, metrics=record.metrics, duration_s=duration
            )
        except Exception as exc:
            # The study's store failed (a full disk, a deleted file): the trial is not in
            # the study, so its run ends KILLED in the stores that work, then the fault goes on.
            ending.outcome, ending.error = Outcome.INTERRUPTED, f"not recorded in the study: {exc}"
            lost = record.ended(ending, None, duration, "")
            self._each(lambda listener: listener.on_ended(lost))
            raise
        if outcome is not Outcome.INTERRUPTED:
            self.finished += 1
        if ending.oom is not None and not ending.oom.predicted:
            ran_out = TrialOutOfMemory(
                record.number, record.admission, ending.oom, ending.co_tenants + 1, self._clock()
            )
            self._each(lambda listener: listener.on_out_of_memory(ran_out))
        if outcome is Outcome.INTERRUPTED:
            self._writes.retry_later(
                record.trial, record.sampled, record.seed, record.checkpoint_dir, record.metrics
            )
        ended = record.ended(ending, values, duration, prune_reason)
        self._each(lambda listener: listener.on_ended(ended))
        return outcome
