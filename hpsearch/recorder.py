"""The driver's record keeper: the one writer of Optuna and MLflow during a search.

Ray Tune tells the runner's adapters what happens to trials; they hand each event
to :class:`TrialRecorder`, which keeps Optuna (the source of truth) and MLflow
(what people look at) in step, and tells listeners such as the progress view.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna
from optuna.trial import TrialState

from hpsearch import attrs
from hpsearch.config import ObjectiveSpec, OomSpec
from hpsearch.oom import MeasuredConfigs, OomCase, cgroup_oom_kills, host_oom_evidence
from hpsearch.oom_records import OomBook, OomVerdict, is_oom
from hpsearch.pruning import PruneJudge
from hpsearch.resources import Admission, RunningTrial
from hpsearch.space import SearchSpace
from hpsearch.study import StudyHandle
from hpsearch.telemetry import TrialGpuMetrics
from hpsearch.tracking import STUDY_TAG, TRIAL_NUMBER_TAG, MlflowTracker, RunStatus
from hpsearch.trial.protocol import (
    PARAMS_KEY,
    SPEC_KEY,
    EventKind,
    Outcome,
    TrialSpec,
    WorkerEvent,
)

GPU_FLUSH_S = 5.0
"""Seconds between writes of running trials' GPU series to MLflow (also at reports and the end)."""

_MLFLOW_STATUS = {
    Outcome.COMPLETE: RunStatus.FINISHED,
    Outcome.FAIL: RunStatus.FAILED,
    Outcome.PRUNED: RunStatus.KILLED,
    Outcome.INTERRUPTED: RunStatus.KILLED,
}


@dataclass(frozen=True)
class TrialSummary:
    """A finished trial, as listeners see it."""

    number: int
    outcome: Outcome
    values: tuple[float, ...] | None
    metrics: dict[str, float]
    params: dict[str, Any]
    duration_s: float
    error: str = ""
    pruned_at: int | None = None
    prune_reason: str = ""


class RunListener(Protocol):
    """Something that follows a search as it runs (the progress view)."""

    def trial_started(self, number: int, admission: Admission) -> None:
        """A trial began running."""

    def trial_finished(self, summary: TrialSummary) -> None:
        """A trial ended, with its outcome."""


@dataclass
class TrialTemplate:
    """The parts of every :class:`TrialSpec` that do not change between trials."""

    train: str
    source: str
    objectives: tuple[str, ...]
    decision_board: str = ""


@dataclass
class _OpenTrial:
    trial: optuna.Trial
    params: dict[str, Any]
    admission: Admission
    run_id: str | None = None
    started_at: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    reached: dict[int, float] = field(default_factory=dict)
    last_step: int | None = None
    pruned_at: int | None = None
    prune_reason: str = ""
    end: WorkerEvent | None = None
    assigned: dict[str, Any] = field(default_factory=dict)
    oom: OomVerdict | None = None
    warm_at: float | None = None
    busy_cpus: float | None = None
    alone: bool = False
    new_kind: bool = False


class OomListener(Protocol):
    """Told of each trial that ran out of GPU memory on a placed GPU (the packing policy)."""

    def trial_ran_out(self, gpu_index: int, node: str, at: float, sharing: int) -> None:
        """A trial on GPU ``gpu_index`` of ``node`` ran out while ``sharing`` trials ran there."""


class PruneBoard(Protocol):
    """Where verdicts for ``ctx.should_prune()`` are posted (a Ray actor in a search)."""

    def post(self, number: int, step: int, prune: bool) -> None:
        """Post the verdict for one step."""

    def forget(self, number: int) -> None:
        """Drop a finished trial's verdicts."""


class TrialRecorder:
    """Turns trial events into Optuna and MLflow records.

    Args:
        handle: the study.
        space: the search space, to ask Optuna for parameters.
        objectives: the objectives, to pick the values told to Optuna.
        tracker: the MLflow writer.
        parent_run_id: this search's MLflow parent run.
        template: fixed parts of each trial's spec.
        board: where pruning verdicts go; ``None`` when no pruner is configured.
        judge: judges each reported step for pruning (with ``board``).
        listeners: told about starts and ends (progress view).
        gpu: per-trial GPU series from the monitor; ``None`` without GPU telemetry.
        oom: the config's ``oom`` section (default: prune, predict from ``batch_size``).
        gpu_memory_mb: each GPU's memory, when known, to cap trials that share one.
        oom_listener: told of OOMs on placed GPUs (the packing policy lowers their count).
    """

    def __init__(
        self,
        handle: StudyHandle,
        *,
        space: SearchSpace,
        objectives: Sequence[ObjectiveSpec],
        tracker: MlflowTracker,
        parent_run_id: str,
        template: TrialTemplate,
        board: PruneBoard | None = None,
        judge: PruneJudge | None = None,
        listeners: Sequence[RunListener] = (),
        gpu: TrialGpuMetrics | None = None,
        oom: OomSpec | None = None,
        gpu_memory_mb: float | None = None,
        oom_listener: OomListener | None = None,
    ) -> None:
        self._handle = handle
        self._oom_listener = oom_listener
        earlier = handle.study.get_trials(deepcopy=False)  # read once for both books below
        self._oom = OomBook(oom or OomSpec(), earlier, gpu_memory_mb)
        self._oom_kills = cgroup_oom_kills()
        # Configurations seen running: a larger one is a new kind for packing.
        self._measured = MeasuredConfigs(self._oom.spec.grows_memory)
        for done in earlier:
            if done.state == TrialState.COMPLETE:
                self._measured.add(done.params)
        self._space = space
        self._objectives = list(objectives)
        self._tracker = tracker
        self._parent_run_id = parent_run_id
        self._template = template
        self._board = board
        self._judge = judge
        self._listeners = list(listeners)
        self._gpu = gpu
        self._last_gpu_flush = 0.0
        self._open: dict[str, _OpenTrial] = {}
        self._distributions = space.distributions()
        self._last_stamp = 0.0
        self._last_reclaim = 0.0

    # -- asked by the searcher ------------------------------------------------

    def running(self) -> list[RunningTrial]:
        """Trials holding resources now, with where they run and how far they got."""
        return [
            RunningTrial(
                t.trial.number,
                t.admission.cpus,
                t.admission.gpus,
                gpu_index=t.admission.gpu_index,
                node=t.admission.node,
                warm_at=t.warm_at,
                pid=t.assigned.get("pid"),
                busy_cpus=t.busy_cpus,
                alone=t.alone,
                new_kind=t.new_kind,
            )
            for t in self._open.values()
        ]

    def study_trials(self) -> list[optuna.trial.FrozenTrial]:
        """Every trial of the study, from storage (other drivers' included)."""
        return self._handle.study.get_trials(deepcopy=False)

    def open_trial(self, tune_id: str, admission: Admission) -> dict[str, Any] | None:
        """Ask Optuna for a new trial and return the Tune config that runs it.

        Returns ``None`` when the suggestion needs at least the memory of one that
        already ran out: it is recorded as pruned (``predicted_oom``) and not launched.
        """
        trial = self._handle.ask(self._distributions)
        params = self._space.trial_params(trial.params)
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
        trial.set_user_attr(attrs.RESOURCES, resources)
        # Read once here: a live trial's user_attrs is a storage query each time.
        alone = attrs.ALONE_RETRY_OF in trial.user_attrs
        new_kind = not self._measured.covers(trial.params)
        record = _OpenTrial(trial, params, admission, alone=alone, new_kind=new_kind)
        known = self._oom.predicted(trial.params, admission.gpus)
        if known is not None:
            self._skip_predicted(record, known)
            return None
        self._open[tune_id] = record
        spec = TrialSpec(
            number=trial.number,
            train=self._template.train,
            source=self._template.source,
            objectives=self._template.objectives,
            cpus=admission.cpus,
            gpus=admission.gpus,
            decision_board=self._template.decision_board,
            memory_cap_mb=self._oom.cap_mb(admission.gpus),
            oom_action=self._oom.spec.action,
            max_halvings=self._oom.spec.max_halvings,
            gpu_index=admission.gpu_index,
            node=admission.node,
            node_address=admission.node_address,
            ray_gpus=admission.ray_gpus,
        )
        return {PARAMS_KEY: params, SPEC_KEY: spec.to_dict()}

    def next_runs_alone(self, trials: Sequence[optuna.trial.FrozenTrial] | None = None) -> bool:
        """Whether the next trial Optuna hands out re-runs, alone on a whole GPU, an OOM.

        Args:
            trials: the study's trials when the caller has just read them.
        """
        if trials is None:
            trials = self.study_trials()
        waiting = [t for t in trials if t.state == TrialState.WAITING]
        return (
            bool(waiting)
            and attrs.ALONE_RETRY_OF in min(waiting, key=lambda t: t.number).user_attrs
        )

    # -- told by the Tune callback ---------------------------------------------

    def trial_started(self, tune_id: str) -> None:
        """The trial's worker started: open its MLflow child run so the UI shows it live."""
        record = self._open.get(tune_id)
        if record is None or record.run_id is not None:
            return
        record.started_at = time.time()
        self._start_mlflow_run(record)
        for listener in self._listeners:
            listener.trial_started(record.trial.number, record.admission)

    def trial_event(self, tune_id: str, event: WorkerEvent) -> None:
        """A report or the end event from the worker."""
        record = self._open.get(tune_id)
        if record is None:
            return
        if event.assigned and not record.assigned:
            self._placed(record, event.assigned)
        if event.kind is EventKind.GPU_LOAD:
            if self._gpu is not None:
                self._gpu.declared_load(
                    record.trial.number,
                    event.gpu_load.get("utilization_pct", 0.0),
                    event.gpu_load.get("memory_mb", 0.0),
                )
            return
        if event.kind is EventKind.KNOBS:
            self._knobs(record, event.info)
            return
        if event.kind is EventKind.END:
            record.end = event
            return
        assert event.step is not None  # reports always carry a step
        if record.warm_at is None:
            record.warm_at = time.time()  # past its warm-up: packing may measure it
            self._measured.add(record.trial.params)
        record.metrics.update(event.metrics)
        record.last_step = event.step
        self._note_targets(record)
        if record.run_id is None:
            self._start_mlflow_run(record)
        assert record.run_id is not None
        self._tracker.log_metrics(record.run_id, event.metrics, event.step)
        self._log_gpu_series(record)
        if self._board is not None:
            self._board.post(record.trial.number, event.step, self._verdict(record, event))

    def trial_ended(self, tune_id: str, crash: str | None = None) -> Outcome | None:
        """Ray is done with the trial: finish it in Optuna and MLflow.

        Args:
            tune_id: Ray Tune's trial id.
            crash: Ray's error when the worker died without an end event.

        Returns:
            How the trial ended; ``None`` for a trial this recorder does not hold.
        """
        record = self._open.pop(tune_id, None)
        if record is None:
            return None
        if record.end is not None and record.end.outcome is not None:
            outcome, error = record.end.outcome, record.end.error
            record.metrics.update(record.end.metrics)
            self._note_targets(record)
            retries = record.end.info.get("retries")
            if retries:
                self._record_retries(record, retries)
            if outcome is Outcome.PRUNED and "oom" in record.end.info:
                self._judge_oom(record, record.end.info["oom"], record.end.info.get("retries", []))
        elif crash is not None:
            outcome, error = Outcome.FAIL, f"trial worker died: {crash}"
            kills = cgroup_oom_kills()
            evidence = host_oom_evidence(crash, self._oom_kills, kills)
            self._oom_kills = kills
            if evidence:
                outcome, error = Outcome.PRUNED, ""
                host = {"kind": "host", "message": evidence, "step": record.last_step}
                self._judge_oom(record, {**host, "peak_mb": None, "cap_mb": None})
        else:
            outcome, error = Outcome.INTERRUPTED, "the search stopped before train returned"
        return self._finish(record, outcome, error)

    def interrupt_open_trials(self) -> int:
        """End every trial still open when the search stops; return how many were interrupted.

        A trial whose worker already sent its end event keeps its outcome.
        """
        outcomes = [self.trial_ended(tune_id) for tune_id in list(self._open)]
        return outcomes.count(Outcome.INTERRUPTED)

    def maintain(self, now: float | None = None) -> None:
        """Periodic upkeep: stamp running trials alive; reclaim the trials of dead drivers."""
        now = time.monotonic() if now is None else now
        if now - self._last_stamp >= self._handle.heartbeat_interval_s / 2:
            self._last_stamp = now
            self._handle.stamp_alive([r.trial for r in self._open.values()])
        if now - self._last_reclaim >= self._handle.grace_period_s / 2:
            self._last_reclaim = now
            reclaim_stale_trials(self._handle, self._tracker)
        if self._gpu is not None and now - self._last_gpu_flush >= GPU_FLUSH_S:
            # GPU series reach MLflow while trials run, not only at their end.
            self._last_gpu_flush = now
            for record in self._open.values():
                self._log_gpu_series(record)

    # -- internals -------------------------------------------------------------

    def _placed(self, record: _OpenTrial, assigned: dict[str, Any]) -> None:
        """The worker said where it runs: record it, and start attributing GPU samples."""
        record.assigned = dict(assigned)
        tags = _assigned_tags(record.assigned)
        if self._gpu is not None:
            note = self._gpu.placed(
                record.trial.number,
                gpu_ids=list(assigned.get("gpu_ids", [])),
                node_id=assigned.get("node_id"),
                pid=assigned.get("pid"),
                started_at=record.started_at or time.time(),
            )
            if note:
                tags["hpsearch.gpu_telemetry"] = note
                record.assigned["gpu_telemetry"] = note
        record.trial.set_user_attr(attrs.ASSIGNED, record.assigned)
        if record.run_id is None:
            self._start_mlflow_run(record)
        assert record.run_id is not None
        self._tracker.set_tags(record.run_id, tags)

    def _log_gpu_series(self, record: _OpenTrial) -> None:
        if self._gpu is None or record.run_id is None:
            return
        points = self._gpu.new_points(record.trial.number)
        if points:
            self._tracker.log_series(record.run_id, points)

    def _finish_gpu(self, record: _OpenTrial) -> None:
        """Last GPU points and the trial's GPU summary, into MLflow and the Optuna trial."""
        if self._gpu is None:
            return
        points, report = self._gpu.finish(record.trial.number, time.time())
        if report is None:
            return
        assert record.run_id is not None
        self._tracker.log_series(record.run_id, points)
        self._tracker.log_metrics(record.run_id, report.metrics, 0)
        self._tracker.set_tags(record.run_id, report.tags)
        record.trial.set_user_attr(attrs.GPU, report.attrs)

    def _start_mlflow_run(self, record: _OpenTrial) -> None:
        number = record.trial.number
        record.run_id = self._tracker.start_run(
            f"trial-{number}",
            params=record.params,
            tags={
                TRIAL_NUMBER_TAG: str(number),
                STUDY_TAG: self._handle.name,
                "hpsearch.cpus": str(record.admission.cpus),
                "hpsearch.gpus": str(record.admission.gpus),
                "hpsearch.policy": record.admission.reason,
                **_placement_tags(record.admission),
            },
            parent_run_id=self._parent_run_id,
        )
        record.trial.set_user_attr(attrs.MLFLOW_RUN, record.run_id)

    def _verdict(self, record: _OpenTrial, event: WorkerEvent) -> bool:
        """The pruning verdict for this step; the first one to prune is kept with its reason."""
        if self._judge is None:
            return False
        step = event.step or 0
        verdict = self._judge.judge(record.trial, step, event.metrics)
        if verdict.prune and record.pruned_at is None:
            record.pruned_at = step
            record.prune_reason = verdict.reason
        return verdict.prune

    def _judge_oom(
        self,
        record: _OpenTrial,
        oom: dict[str, Any],
        retries: list[dict[str, Any]] | None = None,
    ) -> None:
        """An out-of-memory end: the verdict (infeasible, or once more alone) and its reason."""
        ids = set(record.assigned.get("gpu_ids", []))
        node = record.assigned.get("node_id")
        co_tenants = sum(
            1
            for other in self._open.values()
            if ids
            and other.assigned.get("node_id") == node
            and ids & set(other.assigned.get("gpu_ids", []))
        )
        alone_of = record.trial.user_attrs.get(attrs.ALONE_RETRY_OF)
        admission = record.admission
        if self._oom_listener is not None and admission.gpu_index is not None:
            self._oom_listener.trial_ran_out(
                admission.gpu_index, admission.node or "", time.time(), co_tenants + 1
            )
        record.oom = self._oom.judge(
            number=record.trial.number,
            params=record.trial.params,
            oom=oom,
            gpus=record.admission.gpus,
            co_tenants=co_tenants,
            alone_retry_of=alone_of,
            retries=retries or [],
        )
        record.prune_reason = record.oom.reason
        record.pruned_at = oom.get("step")

    def _record_retries(self, record: _OpenTrial, retries: list[dict[str, Any]]) -> None:
        """Keep the smaller-batch retries on the trial: what ran is not what was sampled."""
        record.trial.set_user_attr(attrs.OOM_RETRIES, retries)
        last = retries[-1]
        if record.run_id is not None:
            self._tracker.set_tags(
                record.run_id,
                {
                    "hpsearch.oom_retries": len(retries),
                    "hpsearch.ran_with_batch_size": last["retry_batch_size"],
                    "hpsearch.ran_with_grad_accum_steps": last.get("retry_grad_accum_steps"),
                },
            )

    def _skip_predicted(self, record: _OpenTrial, known: OomCase) -> None:
        """Record a suggestion that would run out of memory as pruned, without running it."""
        grows = [n for n in self._oom.spec.grows_memory if n in record.trial.params]
        larger = ", ".join(f"{n} {record.trial.params[n]} >= {known.params.get(n)}" for n in grows)
        reason = (
            f"predicted_oom: needs at least the memory of trial {known.number}, which ran "
            f"out of memory (the same other parameters{'; ' + larger if larger else ''}); "
            "not launched"
        )
        record.oom = OomVerdict(
            reason=reason, record={"predicted_from": known.number, "kind": "predicted"}
        )
        record.prune_reason = reason
        self._finish(record, Outcome.PRUNED, "")

    def _knobs(self, record: _OpenTrial, info: dict[str, Any]) -> None:
        """The effective throughput knobs: MLflow tags ``knob.*`` and notes; Optuna attr.

        Tags, not params: a knob can still change after it was first recorded
        (checkpointing without a hook is turned off when the model is prepared),
        and MLflow params cannot change.
        """
        effective = dict(info.get("effective", {}))
        notes = [str(n) for n in info.get("notes", [])]
        workers = effective.get("num_workers")
        if isinstance(workers, int):
            record.busy_cpus = float(1 + workers)  # the loop's process and its loader workers
        record.trial.set_user_attr(attrs.KNOBS, {"effective": effective, "notes": notes})
        if record.run_id is None:
            self._start_mlflow_run(record)
        assert record.run_id is not None
        tags: dict[str, Any] = {f"knob.{k}": v for k, v in effective.items()}
        tags["hpsearch.knob_notes"] = "; ".join(notes) or "all knobs applied"
        self._tracker.set_tags(record.run_id, tags)

    def _finish(self, record: _OpenTrial, outcome: Outcome, error: str) -> Outcome:
        trial = record.trial
        values: tuple[float, ...] | None = None
        if outcome is Outcome.COMPLETE:
            values, problem = self._objective_values(record)
            if problem:
                outcome, error = Outcome.FAIL, problem
        duration = time.time() - record.started_at if record.started_at else 0.0

        trial.set_user_attr(attrs.METRICS, record.metrics)
        trial.set_user_attr(attrs.OUTCOME, outcome.value)
        trial.set_user_attr(attrs.DURATION, round(duration, 3))
        if error:
            trial.set_user_attr(attrs.ERROR, error)
        if outcome is Outcome.PRUNED:
            record.prune_reason = _prune_reason(record)
            trial.set_user_attr(attrs.PRUNE_REASON, record.prune_reason)
            if record.pruned_at is not None:
                trial.set_user_attr(attrs.PRUNED_AT, record.pruned_at)
        if record.oom is not None:
            self._oom.record(trial, record.oom)
        if record.run_id is None:
            self._start_mlflow_run(record)
        assert record.run_id is not None
        self._finish_gpu(record)
        self._write_mlflow_end(record, outcome, error)

        self._tell(trial, outcome, values)
        if record.oom is not None and record.oom.run_alone:
            self._handle.study.enqueue_trial(
                dict(trial.params), user_attrs={attrs.ALONE_RETRY_OF: trial.number}
            )
        if outcome is Outcome.INTERRUPTED:
            self._handle.retry_later(trial.number, dict(trial.params))
        if self._board is not None:
            self._board.forget(trial.number)
        self._log_study_progress()

        summary = TrialSummary(
            number=trial.number,
            outcome=outcome,
            values=values,
            metrics=dict(record.metrics),
            params=dict(record.params),
            duration_s=duration,
            error=error,
            pruned_at=record.pruned_at if outcome is Outcome.PRUNED else None,
            prune_reason=record.prune_reason if outcome is Outcome.PRUNED else "",
        )
        for listener in self._listeners:
            listener.trial_finished(summary)
        return outcome

    def _tell(
        self, trial: optuna.Trial, outcome: Outcome, values: tuple[float, ...] | None
    ) -> None:
        """End the trial in Optuna (and in the pruning judge's memory)."""
        if outcome is Outcome.COMPLETE:
            assert values is not None
            state = TrialState.COMPLETE
            self._handle.study.tell(trial, list(values))
        else:
            state = TrialState.PRUNED if outcome is Outcome.PRUNED else TrialState.FAIL
            self._handle.study.tell(trial, state=state)
        if self._judge is not None:
            self._judge.finished(trial, state, list(values or ()))

    def _note_targets(self, record: _OpenTrial) -> None:
        """Keep each ``until`` objective's value at the first report that reached its target."""
        for index, objective in enumerate(self._objectives):
            target = objective.until
            if target is None or index in record.reached or not target.reached(record.metrics):
                continue
            if objective.metric in record.metrics:
                record.reached[index] = record.metrics[objective.metric]

    def _objective_values(self, record: _OpenTrial) -> tuple[tuple[float, ...] | None, str]:
        """The objective values of a completed trial, or why there are none."""
        metrics = record.metrics
        values = []
        for index, objective in enumerate(self._objectives):
            if objective.until is not None:
                # Never reached: the worst value, so the trial is dominated on this axis.
                worst = math.inf if objective.direction == "minimize" else -math.inf
                values.append(record.reached.get(index, worst))
                continue
            if objective.metric not in metrics:
                reported = ", ".join(sorted(metrics)) or "nothing"
                return None, (
                    f"train finished without reporting the objective metric '{objective.metric}' "
                    f"(reported: {reported}); report it with ctx.report(step, "
                    f"{objective.metric}=...) or fix the objective in {self._template.source}"
                )
            value = metrics[objective.metric]
            if not math.isfinite(value):
                return None, f"the objective metric '{objective.metric}' is {value}"
            values.append(value)
        return tuple(values), ""

    def _write_mlflow_end(self, record: _OpenTrial, outcome: Outcome, error: str) -> None:
        assert record.run_id is not None
        run_id = record.run_id
        if record.end is not None and record.end.metrics:
            step = record.last_step + 1 if record.last_step is not None else 0
            self._tracker.log_metrics(run_id, record.end.metrics, step)
        tags: dict[str, Any] = {
            "hpsearch.outcome": outcome.value,
            # The Optuna state, since MLflow's run statuses have no PRUNED.
            "hpsearch.state": _OPTUNA_STATE[outcome],
        }
        if error:
            tags["hpsearch.error"] = error
            self._tracker.log_text(run_id, error, "error.txt")
        for index, objective in enumerate(self._objectives):
            if objective.until is not None:
                # MLflow metric names cannot hold the objective's name ("x@y>=0.9").
                key = f"{objective.metric}_to_{objective.until.metric}"
                if index in record.reached:
                    self._tracker.log_metrics(run_id, {key: record.reached[index]}, 0)
                else:
                    tags[f"hpsearch.{key}"] = f"{objective.until.label} not reached"
        if outcome is Outcome.PRUNED:
            tags["hpsearch.prune_reason"] = record.prune_reason
            if record.pruned_at is not None:
                tags["hpsearch.pruned_at_step"] = record.pruned_at
        status = _MLFLOW_STATUS[outcome]
        if record.oom is not None:
            # An OOM is a finished answer about the configuration, not a killed run.
            status = RunStatus.FINISHED
            tags["hpsearch.prune_kind"] = (
                "predicted_oom" if "predicted_from" in record.oom.record else "oom"
            )
            tags.update({f"hpsearch.oom.{k}": v for k, v in record.oom.record.items()})
        self._tracker.set_tags(run_id, tags)
        self._tracker.end_run(run_id, status)

    def _log_study_progress(self) -> None:
        """Counts and best value so far on the parent run, stepped by finished trials."""
        study = self._handle.study
        trials = study.get_trials(deepcopy=False)
        counts = {
            "trials_complete": sum(t.state == TrialState.COMPLETE for t in trials),
            "trials_pruned": sum(t.state == TrialState.PRUNED for t in trials),
            "trials_failed": sum(t.state == TrialState.FAIL for t in trials),
        }
        step = sum(counts.values())
        metrics: dict[str, float] = {k: float(v) for k, v in counts.items()}
        metrics.update(oom_summary(trials))
        if counts["trials_complete"] and len(self._objectives) == 1:
            metrics[f"best_{self._objectives[0].metric}"] = float(study.best_value)
            if not math.isfinite(metrics[f"best_{self._objectives[0].metric}"]):
                del metrics[f"best_{self._objectives[0].metric}"]
        elif counts["trials_complete"]:
            metrics["pareto_front_size"] = float(len(study.best_trials))
        self._tracker.log_metrics(self._parent_run_id, metrics, step)


_OPTUNA_STATE = {
    Outcome.COMPLETE: "COMPLETE",
    Outcome.FAIL: "FAIL",
    Outcome.PRUNED: "PRUNED",
    Outcome.INTERRUPTED: "FAIL",
}


def _prune_reason(record: _OpenTrial) -> str:
    """The pruner's reason, else the trial's own ``TrialPruned`` message."""
    own = str(record.end.info.get("reason", "")) if record.end is not None else ""
    if record.prune_reason:
        return record.prune_reason
    if own:
        return f"the training function pruned itself: {own}"
    return "the training function raised TrialPruned (no reason given)"


def oom_summary(trials: Sequence[optuna.trial.FrozenTrial]) -> dict[str, float]:
    """Counts of OOM trials and the share of GPU-seconds they used, for the parent run.

    GPU-seconds are each finished trial's duration times the GPU share it held;
    the share is absent in a search without GPUs.
    """
    ran_out = [t for t in trials if is_oom(t) and "predicted_from" not in t.user_attrs[attrs.OOM]]
    predicted = [t for t in trials if is_oom(t) and "predicted_from" in t.user_attrs[attrs.OOM]]
    summary = {"trials_oom": float(len(ran_out)), "trials_predicted_oom": float(len(predicted))}

    def gpu_seconds(trial: optuna.trial.FrozenTrial) -> float:
        gpus = float(trial.user_attrs.get(attrs.RESOURCES, {}).get("gpus", 0.0))
        return gpus * float(trial.user_attrs.get(attrs.DURATION, 0.0))

    total = sum(gpu_seconds(t) for t in trials if t.state.is_finished())
    if total > 0:
        summary["oom_wasted_gpu_seconds_share"] = sum(gpu_seconds(t) for t in ran_out) / total
    return summary


def reclaim_stale_trials(handle: StudyHandle, tracker: MlflowTracker) -> int:
    """Fail trials whose driver is gone, enqueue them again, and end their MLflow runs as KILLED."""
    reclaimed = handle.reclaim_stale()
    for trial in reclaimed:
        run_id = trial.user_attrs.get(attrs.MLFLOW_RUN)
        if run_id:
            tracker.end_if_running(str(run_id), RunStatus.KILLED)
    return len(reclaimed)


def _placement_tags(admission: Admission) -> dict[str, str]:
    """Where a placing policy put the trial: its GPU, its share and its co-tenants at start."""
    if admission.gpu_index is None:
        return {}
    return {
        "hpsearch.gpu": str(admission.gpu_index),
        "hpsearch.node": admission.node_address or "",
        "hpsearch.node_id": admission.node or "",
        "hpsearch.gpu_share": f"{admission.gpus:.3g}",
        "hpsearch.co_tenants_at_start": ",".join(map(str, admission.co_tenants)) or "none",
    }


def _assigned_tags(assigned: dict[str, Any]) -> dict[str, str]:
    tags = {f"hpsearch.assigned.{k}": str(v) for k, v in assigned.items() if k != "gpu_ids"}
    tags["hpsearch.gpu_ids"] = ",".join(assigned.get("gpu_ids", [])) or "none"
    return tags
