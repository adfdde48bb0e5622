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
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from hpsearch import attrs
from hpsearch.lifecycle._base import TrialListener
from hpsearch.lifecycle._events import (
    Ending,
    GpuLoadDeclared,
    KnobsReported,
    Measured,
    Opening,
    TrialEnded,
    TrialOpened,
    TrialOutOfMemory,
    TrialPlaced,
    TrialPruned,
    TrialReported,
    TrialsReclaimed,
    TrialStarted,
)
from hpsearch.lifecycle._objectives import ObjectiveValues
from hpsearch.oom import memory_cap_mb
from hpsearch.placement import Admission
from hpsearch.pruning import KEEP, PruneJudge, forget_intermediate
from hpsearch.space import SearchSpace
from hpsearch.study import StudyHandle
from hpsearch.trial.checkpoints import trial_folder
from hpsearch.trial.death import (
    WorkerExit,
    node_lost,
    output_file,
    stderr_file,
    worker_death,
    worker_exit,
)
from hpsearch.trial.protocol import (
    PARAMS_KEY,
    SPEC_KEY,
    Assignment,
    EventKind,
    Outcome,
    TrialSpec,
    WorkerEvent,
)
from hpsearch.trial.seeds import trial_seed

STOPPED_EARLY = "the search stopped before train returned"
"""Why a trial still open when its search stopped was interrupted, unless told otherwise."""


@dataclass(frozen=True)
class TrialTemplate:
    """The parts of every :class:`TrialSpec` that do not change between trials.

    Attributes:
        gpu_memory_mb: each GPU's memory (the smallest), to turn a share into a
            memory cap; ``None``: unknown.
        pace_file: where simulated GPUs' speed shares are published for workers.
        timeout_s: the longest a trial may run (``execution.trial_timeout``).
        worker_dir: a folder the driver shares with the workers of its machine: each
            trial's stderr and each worker's exit (for a crash's record).
        study: the study name (a trial's seed and checkpoint folder derive from it).
        seed: the study's seed (``study.sampler.seed``).
        checkpoints: the root of the checkpoint folders (``execution.checkpoint_dir``).
        command: a training script's :class:`~hpsearch.config.CommandSpec` as JSON
            (empty: ``train`` is a function).
        trials: the root of the trials' own folders (``execution.trials_dir``).
        workdir: the driver's working directory (a command runs there).
    """

    train: str
    source: str
    objectives: tuple[str, ...]
    decision_board: str = ""
    oom_action: str = "prune"
    max_halvings: int = 2
    gpu_memory_mb: float | None = None
    pace_file: str = ""
    timeout_s: float | None = None
    worker_dir: str = ""
    study: str = ""
    seed: int | None = None
    checkpoints: str = "mlruns/checkpoints"
    command: str = ""
    trials: str = "mlruns/trials"
    workdir: str = ""

    def seed_of(self, number: int) -> int:
        """The seed of a new trial ``number``."""
        return trial_seed(self.seed, self.study, number)

    def checkpoint_dir(self, number: int) -> str:
        """The checkpoint folder of a new trial ``number`` (its re-runs inherit it)."""
        return trial_folder(self.checkpoints, self.study, number)

    def spec(
        self, number: int, admission: Admission, seed: int = 0, checkpoint_dir: str = ""
    ) -> TrialSpec:
        """The spec of trial ``number`` admitted with ``admission``, its seed and checkpoints."""
        return TrialSpec(
            number=number,
            train=self.train,
            source=self.source,
            objectives=self.objectives,
            cpus=admission.cpus,
            gpus=admission.gpus,
            decision_board=self.decision_board,
            memory_cap_mb=memory_cap_mb(admission.gpus, self.gpu_memory_mb),
            oom_action=self.oom_action,
            max_halvings=self.max_halvings,
            gpu_index=admission.gpu_index,
            node=admission.node,
            node_address=admission.node_address,
            ray_gpus=admission.ray_gpus,
            pace_file=self.pace_file,
            timeout_s=self.timeout_s,
            stderr_file=stderr_file(self.worker_dir, number),
            stdout_file=output_file(self.worker_dir, number, "stdout"),
            seed=seed,
            checkpoint_dir=checkpoint_dir or self.checkpoint_dir(number),
            command=self.command,
            trial_dir=trial_folder(self.trials, self.study, number),
            workdir=self.workdir,
        )


@dataclass
class _Open:
    number: int
    trial: optuna.Trial
    sampled: dict[str, Any]
    params: dict[str, Any]
    admission: Admission
    seed: int = 0
    checkpoint_dir: str = ""
    resumes_run: str | None = None
    alone_retry_of: int | None = None
    announced: bool = False
    started_at: float | None = None
    measured_at: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    reached: dict[int, float] = field(default_factory=dict)
    last_step: int | None = None
    pruned_at: int | None = None
    prune_reason: str = ""
    end: WorkerEvent | None = None
    assigned: Assignment | None = None
    waited_for_whole_gpu: str = ""


class TrialLedger:
    """Owns the open trials and Optuna's ask/tell; tells its listeners what happens.

    Args:
        handle: the study.
        space: the search space, to ask Optuna for parameters.
        objectives: reads a completed trial's objective values.
        template: the fixed parts of each trial's spec.
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
        template: TrialTemplate,
        judge: PruneJudge | None = None,
        listeners: Sequence[TrialListener] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._handle = handle
        self._space = space
        self._objectives = objectives
        self._template = template
        self._judge = judge
        self._listeners = list(listeners)
        self._clock = clock
        self._open: dict[str, _Open] = {}
        self._waiting: list[_Open] = []
        self.finished = 0
        """Trials this ledger ended complete, pruned or failed (not interrupted)."""
        self._last_stamp = -float("inf")
        self._last_reclaim = -float("inf")

    # -- asked by the scheduler ---------------------------------------------------

    def study_trials(self) -> list[optuna.trial.FrozenTrial]:
        """Every trial of the study, from storage (other drivers' included)."""
        return self._handle.study.get_trials(deepcopy=False)

    def exclusive(self) -> AbstractContextManager[None]:
        """Held while the study's trials are counted and one is asked for (other drivers wait)."""
        return self._handle.exclusive()

    def open(self, trial_id: str, admission: Admission) -> dict[str, Any] | None:
        """Ask Optuna for a new trial and return the runner's config that runs it.

        Returns ``None`` when a listener held the suggestion back: it needs at
        least the memory of one that ran out (recorded as pruned, not launched),
        or more than its share (it waits for a whole GPU: :meth:`open_waiting`).
        """
        trial = self._handle.ask()
        sampled = self._space.suggest(trial)
        inherited = trial.user_attrs  # read once: a live trial's user_attrs is a query
        forget_intermediate(trial, inherited)
        record = _Open(
            number=trial.number,
            trial=trial,
            sampled=sampled,
            params=self._space.trial_params(sampled),
            admission=admission,
            alone_retry_of=inherited.get(attrs.ALONE_RETRY_OF),
            # A re-run of an interrupted trial (queued by this ledger, or by Optuna's
            # heartbeat callback, which copies the lost trial's attrs) keeps its seed
            # and checkpoints, and links to its earlier MLflow run.
            seed=inherited.get(attrs.SEED, self._template.seed_of(trial.number)),
            checkpoint_dir=inherited.get(
                attrs.CHECKPOINT_DIR, self._template.checkpoint_dir(trial.number)
            ),
            resumes_run=inherited.get(attrs.MLFLOW_RUN) or inherited.get(attrs.RESUMES_RUN),
        )
        if attrs.SEED not in inherited:
            trial.set_user_attr(attrs.SEED, record.seed)
            trial.set_user_attr(attrs.CHECKPOINT_DIR, record.checkpoint_dir)
        return self._launch(trial_id, record)

    @property
    def waiting(self) -> int:
        """Trials asked for that wait for a whole GPU."""
        return len(self._waiting)

    def open_waiting(self, trial_id: str, admission: Admission) -> dict[str, Any] | None:
        """Launch the longest-waiting trial that needs a whole GPU, with ``admission``."""
        record = self._waiting.pop(0)
        record.admission = admission
        return self._launch(trial_id, record)

    def _launch(self, trial_id: str, record: _Open) -> dict[str, Any] | None:
        """Record the trial's resources; launch it unless a listener holds it back."""
        admission, trial = record.admission, record.trial
        resources: dict[str, Any] = {
            "cpus": admission.cpus,
            "gpus": admission.gpus,
            "reason": admission.reason,
        }
        if admission.gpu_index is not None:
            resources.update(
                gpu=admission.gpu_index,
                node=admission.node_address,
                node_id=admission.node,
                co_tenants=list(admission.co_tenants),
            )
        opening = Opening(record.number, trial, record.sampled, admission)
        self._each(lambda listener: listener.on_opening(opening))
        waits = bool(opening.whole_gpu_reason) and 0 < admission.gpus < 1
        if waits:
            record.waited_for_whole_gpu = opening.whole_gpu_reason
        if record.waited_for_whole_gpu:
            resources["waits_for_whole_gpu"] = record.waited_for_whole_gpu
        trial.set_user_attr(attrs.RESOURCES, resources)
        if waits:
            self._waiting.append(record)
            return None
        if opening.skip_reason:
            ending = self._ending(record, Outcome.PRUNED)
            ending.prune_reason, ending.oom = opening.skip_reason, opening.skip_oom
            self._finish(record, ending)
            return None
        self._open[trial_id] = record
        opened = TrialOpened(record.number, record.sampled, admission, record.alone_retry_of)
        self._each(lambda listener: listener.on_opened(opened))
        spec = self._template.spec(record.number, admission, record.seed, record.checkpoint_dir)
        return {PARAMS_KEY: record.params, SPEC_KEY: spec.to_dict()}

    # -- told by the runner ---------------------------------------------------------

    def started(self, trial_id: str) -> None:
        """The trial's worker started."""
        record = self._open.get(trial_id)
        if record is None or record.started_at is not None:
            return
        record.started_at = self._clock()
        self._announce(record)

    def event(self, trial_id: str, event: WorkerEvent) -> None:
        """A report, a declaration or the end event from the trial's worker."""
        record = self._open.get(trial_id)
        if record is None:
            return
        if event.assigned is not None and record.assigned is None:
            self._placed(record, event.assigned)
        if event.kind is EventKind.GPU_LOAD and event.gpu_load is not None:
            declared = GpuLoadDeclared(record.number, event.gpu_load)
            self._each(lambda listener: listener.on_gpu_load(declared))
        elif event.kind is EventKind.KNOBS and event.knobs is not None:
            record.trial.set_user_attr(attrs.KNOBS, event.knobs.to_dict())
            self._announce(record)
            knobs = KnobsReported(record.number, event.knobs)
            self._each(lambda listener: listener.on_knobs(knobs))
        elif event.kind is EventKind.END:
            record.end = event
        elif event.kind is EventKind.REPORT and event.step is not None:
            self._reported(record, event.step, event.metrics)

    def ended(self, trial_id: str, crash: str | None = None) -> Outcome | None:
        """The runner is done with the trial: finish it in Optuna, tell the listeners.

        Args:
            trial_id: the runner's trial id.
            crash: the runner's error when the worker died without an end event.

        Returns:
            How the trial ended; ``None`` for a trial this ledger does not hold.
        """
        return self._close(trial_id, crash, STOPPED_EARLY)

    def _close(self, trial_id: str, crash: str | None, interrupted: str) -> Outcome | None:
        """End an open trial; ``interrupted``: why, when it ends without an outcome or a crash."""
        record = self._open.pop(trial_id, None)
        if record is None:
            return None
        end = record.end
        if end is not None and end.outcome is not None:
            # What train returns measures the whole trial (a rate over all of it).
            whole = record.started_at
            record.metrics.update(self._measured(record, end.metrics, since=whole))
            self._objectives.note_targets(record.metrics, record.reached)
            ending = self._ending(record, end.outcome, end.error)
            ending.report = end.end
        elif crash is not None and node_lost(crash):
            # Not the trial's fault: it runs again (from its last checkpoint) next run.
            reason = f"its node was lost; it runs again, from its last checkpoint\nRay: {crash}"
            ending = self._ending(record, Outcome.INTERRUPTED, reason)
        elif crash is not None:
            pid = record.assigned.pid if record.assigned is not None else None
            ended = worker_exit(self._template.worker_dir, pid)
            ending = self._ending(record, Outcome.FAIL, self._death(record, crash, ended))
            # What the host-OOM check reads: the runner's word and how the worker ended.
            ending.crash = crash if ended is None else f"{ended.describe()}\n{crash}"
        else:
            ending = self._ending(record, Outcome.INTERRUPTED, interrupted)
        return self._finish(record, ending)

    def _death(self, record: _Open, crash: str, ended: WorkerExit | None) -> str:
        """Why a worker died without an end event: past its time limit, or the runner's error."""
        limit = self._template.timeout_s
        ran = self._clock() - record.started_at if record.started_at is not None else 0.0
        if limit is not None and ran >= limit:
            last = "none" if record.last_step is None else str(record.last_step)
            return (
                f"timeout: ran past execution.trial_timeout ({limit:g} s) and was stopped; "
                f"last reported step: {last}"
            )
        return worker_death(crash, stderr_file(self._template.worker_dir, record.number), ended)

    def interrupt_open(self, reason: str | None = None) -> int:
        """End every trial still open when the search stops; return how many were interrupted.

        A trial whose worker already sent its end event keeps its outcome; the
        others are interrupted for ``reason`` (and run again on the next run).
        """
        why = reason or STOPPED_EARLY
        outcomes = [self._close(trial_id, None, why) for trial_id in list(self._open)]
        while self._waiting:  # asked for, never launched: they run again next time
            record = self._waiting.pop(0)
            reason = "the search stopped while it waited for a whole GPU"
            outcomes.append(self._finish(record, self._ending(record, Outcome.INTERRUPTED, reason)))
        return outcomes.count(Outcome.INTERRUPTED)

    def maintain(self, now: float | None = None) -> None:
        """Periodic upkeep: stamp open trials alive, reclaim a dead driver's trials, tick.

        Args:
            now: monotonic wall-clock seconds (default: now). Heartbeats are judged by
                the database's clock and series are flushed for people watching, so
                upkeep keeps to wall time even when the runner's clock is virtual.
        """
        now = time.monotonic() if now is None else now
        if now - self._last_stamp >= self._handle.heartbeat_interval_s / 2:
            self._last_stamp = now
            alive = [*self._open.values(), *self._waiting]
            self._handle.stamp_alive([r.trial for r in alive])
        if now - self._last_reclaim >= self._handle.grace_period_s / 2:
            self._last_reclaim = now
            reclaimed = self._handle.reclaim_stale()
            if reclaimed:
                gone = TrialsReclaimed(tuple(reclaimed))
                self._each(lambda listener: listener.on_reclaimed(gone))
        self._each(lambda listener: listener.on_tick(now))

    # -- internals -----------------------------------------------------------------

    def _each(self, tell: Callable[[TrialListener], None]) -> None:
        for listener in self._listeners:
            tell(listener)

    def _announce(self, record: _Open) -> None:
        """Tell listeners the trial started, once, before anything else about it."""
        if record.announced:
            return
        record.announced = True
        at = record.started_at if record.started_at is not None else self._clock()
        started = TrialStarted(
            record.number, record.trial, record.params, record.admission, at, record.resumes_run
        )
        self._each(lambda listener: listener.on_started(started))

    def _placed(self, record: _Open, assigned: Assignment) -> None:
        record.assigned = assigned
        record.trial.set_user_attr(attrs.ASSIGNED, assigned.to_dict())
        self._announce(record)
        started_at = record.started_at if record.started_at is not None else self._clock()
        placed = TrialPlaced(record.number, assigned, started_at)
        self._each(lambda listener: listener.on_placed(placed))

    def _measured(
        self, record: _Open, metrics: dict[str, float], since: float | None = None
    ) -> dict[str, float]:
        """``metrics`` with what listeners derive from them (a speed's solo equivalent).

        Args:
            since: when the interval they measure began (default: the previous report,
                or the trial's start).
        """
        if not metrics:
            return metrics
        now = self._clock()
        if since is None:
            since = record.measured_at if record.measured_at is not None else record.started_at
        record.measured_at = now
        measured = Measured(record.number, dict(metrics), now if since is None else since, now)
        self._each(lambda listener: listener.on_measured(measured))
        return {**metrics, **measured.derived}

    def _reported(self, record: _Open, step: int, raw: dict[str, float]) -> None:
        first = record.last_step is None
        self._announce(record)
        metrics = self._measured(record, raw)
        record.metrics.update(metrics)
        record.last_step = step
        self._objectives.note_targets(record.metrics, record.reached)
        verdict = KEEP if self._judge is None else self._judge.judge(record.trial, step, metrics)
        # The first verdict to prune is kept, with its reason, for the trial's end.
        newly_pruned = verdict.prune and record.pruned_at is None
        if newly_pruned:
            record.pruned_at, record.prune_reason = step, verdict.reason
        reported = TrialReported(
            record.number, step, dict(metrics), first, verdict, self._sharing(record)
        )
        self._each(lambda listener: listener.on_reported(reported))
        if newly_pruned:
            pruned = TrialPruned(record.number, step, verdict.reason)
            self._each(lambda listener: listener.on_pruned(pruned))

    def _sharing(self, record: _Open) -> int:
        """Trials on the record's GPU now, itself included (0: it has no GPU)."""
        mine = record.assigned
        if mine is None or not mine.gpu_ids:
            return 0
        others = sum(
            1
            for other in self._open.values()
            if other is not record
            and other.assigned is not None
            and mine.shares_gpu_with(other.assigned)
        )
        return others + 1

    def _ending(self, record: _Open, outcome: Outcome, error: str = "") -> Ending:
        co_tenants = max(0, self._sharing(record) - 1)
        return Ending(
            number=record.number,
            trial=record.trial,
            params=record.sampled,
            admission=record.admission,
            outcome=outcome,
            error=error,
            co_tenants=co_tenants,
            alone_retry_of=record.alone_retry_of,
            last_step=record.last_step,
            prune_reason=record.prune_reason,
            pruned_at=record.pruned_at,
        )

    def _finish(self, record: _Open, ending: Ending) -> Outcome:
        values: tuple[float, ...] | None = None
        if ending.outcome is Outcome.COMPLETE:
            values, problem = self._objectives.values(record.metrics, record.reached)
            if problem:
                ending.outcome, ending.error = Outcome.FAIL, problem
        self._announce(record)
        self._each(lambda listener: listener.on_ending(ending))
        outcome, trial = ending.outcome, record.trial
        duration = self._clock() - record.started_at if record.started_at is not None else 0.0

        trial.set_user_attr(attrs.METRICS, record.metrics)
        trial.set_user_attr(attrs.OUTCOME, outcome.value)
        trial.set_user_attr(attrs.DURATION, round(duration, 3))
        if ending.error:
            trial.set_user_attr(attrs.ERROR, ending.error)
        prune_reason = ""
        if outcome is Outcome.PRUNED:
            prune_reason = _prune_reason(ending)
            trial.set_user_attr(attrs.PRUNE_REASON, prune_reason)
            if ending.pruned_at is not None:
                trial.set_user_attr(attrs.PRUNED_AT, ending.pruned_at)
        self._tell(trial, outcome, values)
        if outcome is not Outcome.INTERRUPTED:
            self.finished += 1

        if ending.oom is not None and not ending.oom.predicted:
            ran_out = TrialOutOfMemory(
                record.number, record.admission, ending.oom, ending.co_tenants + 1, self._clock()
            )
            self._each(lambda listener: listener.on_out_of_memory(ran_out))
        if outcome is Outcome.INTERRUPTED:
            kept = {attrs.SEED: record.seed, attrs.CHECKPOINT_DIR: record.checkpoint_dir}
            earlier = record.trial.user_attrs.get(attrs.MLFLOW_RUN)
            if earlier:
                kept[attrs.RESUMES_RUN] = earlier
            self._handle.retry_later(record.number, record.sampled, kept)
        ended = TrialEnded(
            number=record.number,
            outcome=outcome,
            values=values,
            metrics=dict(record.metrics),
            end_metrics=dict(record.end.metrics) if record.end is not None else {},
            params=dict(record.params),
            admission=record.admission,
            duration_s=duration,
            error=ending.error,
            last_step=record.last_step,
            pruned_at=ending.pruned_at if outcome is Outcome.PRUNED else None,
            prune_reason=prune_reason,
            reached=dict(record.reached),
            oom=ending.oom,
            retries=ending.report.retries if ending.report is not None else (),
            peak_memory_mb=ending.peak_memory_mb,
            checkpoint_dir=record.checkpoint_dir,
        )
        self._each(lambda listener: listener.on_ended(ended))
        return outcome

    def _tell(
        self, trial: optuna.Trial, outcome: Outcome, values: tuple[float, ...] | None
    ) -> None:
        """End the trial in Optuna (and in the pruning judge's memory)."""
        if outcome is Outcome.COMPLETE and values is not None:
            state = TrialState.COMPLETE
            self._handle.study.tell(trial, list(values))
        else:
            state = TrialState.PRUNED if outcome is Outcome.PRUNED else TrialState.FAIL
            self._handle.study.tell(trial, state=state)
        if self._judge is not None:
            self._judge.finished(trial, state, list(values or ()))


def _prune_reason(ending: Ending) -> str:
    """The pruner's (or an amendment's) reason, else the trial's own ``TrialPruned`` message."""
    if ending.prune_reason:
        return ending.prune_reason
    own = ending.report.reason if ending.report is not None else ""
    if own:
        return f"the training function pruned itself: {own}"
    return "the training function raised TrialPruned (no reason given)"
