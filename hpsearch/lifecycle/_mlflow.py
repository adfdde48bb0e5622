"""The MLflow mirror: one nested child run per trial, kept in step with the ledger's events.

Like Optuna's ``MLflowCallback``, it writes what Optuna already holds into
MLflow, but while the trial runs: the run opens when the trial starts, gets
each report as metrics, its placement and knobs as tags, and ends with the
trial's outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from hpsearch import attrs
from hpsearch.config import ObjectiveSpec
from hpsearch.lifecycle._base import TrialListener
from hpsearch.lifecycle._events import (
    OPTUNA_STATE,
    KnobsReported,
    TrialEnded,
    TrialOpened,
    TrialPlaced,
    TrialPruned,
    TrialReported,
    TrialsReclaimed,
    TrialStarted,
    kept_error,
)
from hpsearch.placement import Admission
from hpsearch.study import StudyHandle, set_user_attr_late
from hpsearch.tracking import (
    FLUSH_S,
    FUSED_GROUP_TAG,
    MAX_TAG_CHARS,
    RESUMES_RUN_TAG,
    STUDY_TAG,
    TRIAL_NUMBER_TAG,
    RunStatus,
    Tracker,
    mlflow_name,
)
from hpsearch.trial.death import output_file, output_tail
from hpsearch.trial.protocol import Assignment, Outcome

_MAX_TAG_NAME = 250
"""The longest name MLflow takes for a tag."""


def _taggable(name: str) -> bool:
    """Whether MLflow takes ``name`` as a tag's (its characters, a path it need not
    normalise, none of MLflow's own names), so that one attr's name cannot fail the batch
    that ends the trial's run."""
    if not 0 < len(name) <= _MAX_TAG_NAME or name.startswith("mlflow."):
        return False
    return mlflow_name(name) == name


class MlflowMirror(TrialListener):
    """Mirrors each trial into a child run of the search's parent run.

    Args:
        tracker: the MLflow writer.
        study: the study name (a tag on every run).
        parent_run_id: this search's parent run.
        objectives: the config's objectives (``until`` ones get a metric of their own).
        logs_dir: where workers of this machine copy each trial's stdout and stderr;
            attached to its run as ``logs/stdout.txt`` and ``logs/stderr.txt`` when it
            ends, and then removed.
    """

    def __init__(
        self,
        tracker: Tracker,
        study: str,
        parent_run_id: str,
        objectives: Sequence[ObjectiveSpec],
        *,
        logs_dir: str = "",
    ) -> None:
        self._tracker = tracker
        self._logs_dir = logs_dir
        self._study = study
        self._parent = parent_run_id
        self._objectives = list(objectives)
        self._runs: dict[int, str] = {}
        self._logged: dict[int, set[str]] = {}

    def run_id(self, number: int) -> str | None:
        """The child run of trial ``number`` while it is open."""
        return self._runs.get(number)

    def on_opened(self, event: TrialOpened) -> None:
        # The run opens as the trial is launched, not when its worker starts: a driver
        # killed while a worker starts leaves a run for the survivor to end as KILLED.
        self._open_run(event, event.train_params)

    def on_started(self, event: TrialStarted) -> None:
        # A trial that ends without a launch (predicted out of memory) opens here.
        if event.number not in self._runs:
            self._open_run(event, event.params)

    def _open_run(self, event: TrialOpened | TrialStarted, params: dict[str, Any]) -> None:
        number, admission = event.number, event.admission
        run_id = self._tracker.start_run(
            f"trial-{number}",
            params=params,
            tags={
                TRIAL_NUMBER_TAG: str(number),
                STUDY_TAG: self._study,
                "hpsearch.cpus": str(admission.cpus),
                "hpsearch.gpus": str(admission.gpus),
                "hpsearch.policy": admission.reason,
                **_placement_tags(admission),
                **({RESUMES_RUN_TAG: event.resumes_run} if event.resumes_run else {}),
                **({FUSED_GROUP_TAG: str(event.group)} if event.group is not None else {}),
            },
            parent_run_id=self._parent,
        )
        self._runs[number] = run_id
        self._logged[number] = set(params)
        trial, parent = event.trial, self._parent
        # At once; or, with the tracking server out of reach, once the run is created;
        # or, never created, marked for the next search to record from the study.
        self._tracker.when_created(
            run_id,
            lambda created: set_user_attr_late(trial.storage, trial, attrs.MLFLOW_RUN, created),
            lambda: set_user_attr_late(trial.storage, trial, attrs.MLFLOW_UNWRITTEN, parent),
        )

    def on_placed(self, event: TrialPlaced) -> None:
        self._tracker.set_tags(self._runs[event.number], _assigned_tags(event.assigned))

    def on_reported(self, event: TrialReported) -> None:
        metrics = dict(event.metrics)
        if event.sharing:
            # What it measured of its own speed (samples/s, step time) it measured so.
            metrics["trials_sharing_gpu"] = float(event.sharing)
        self._tracker.log_metrics(self._runs[event.number], metrics, event.step)

    def on_pruned(self, event: TrialPruned) -> None:
        # Shown at once: a trial may take a while to reach its next should_prune().
        tags = {"hpsearch.pruned_at_step": event.step, "hpsearch.prune_reason": event.reason}
        self._tracker.set_tags(self._runs[event.number], tags)

    def on_knobs(self, event: KnobsReported) -> None:
        # Tags, not params: a knob can still change after it was first recorded
        # (checkpointing without a hook is turned off when the model is prepared),
        # and MLflow params cannot change.
        knobs = event.knobs
        tags: dict[str, Any] = {f"knob.{k}": v for k, v in knobs.effective.items()}
        tags["hpsearch.knob_notes"] = "; ".join(knobs.notes) or "all knobs applied"
        self._tracker.set_tags(self._runs[event.number], tags)

    def _move_output(self, run_id: str, number: int) -> None:
        """Attach trial ``number``'s stdout and stderr (their last 4 MiB) to its run, and
        remove their files: the workers' folder keeps only running trials' output."""
        for stream in ("stdout", "stderr"):
            path = output_file(self._logs_dir, number, stream)
            text = output_tail(path)
            if text is not None:
                self._tracker.log_text(run_id, text, f"logs/{stream}.txt")
            if path:
                Path(path).unlink(missing_ok=True)

    def on_ended(self, event: TrialEnded) -> None:
        run_id = self._runs.pop(event.number)
        logged = self._logged.pop(event.number, set())
        # An Optuna objective's own suggestions, made in its worker, join the run's params.
        self._tracker.log_params(run_id, {k: v for k, v in event.params.items() if k not in logged})
        if event.end_metrics:
            step = event.last_step + 1 if event.last_step is not None else 0
            self._tracker.log_metrics(run_id, event.end_metrics, step)
        tags: dict[str, Any] = {
            # What an objective set on its trial, as Optuna's MLflowCallback tags it (by
            # name); a name MLflow would refuse, or one of its own, is left to the study.
            **{k: v for k, v in event.user_attrs.items() if _taggable(k)},
            "hpsearch.outcome": event.outcome.value,
            # The Optuna state, since MLflow's run statuses have no PRUNED.
            "hpsearch.state": OPTUNA_STATE[event.outcome].name,
        }
        if event.error:
            tags["hpsearch.error"] = kept_error(event.error, MAX_TAG_CHARS)
            self._tracker.log_text(run_id, event.error, "error.txt")
        self._move_output(run_id, event.number)
        for index, objective in enumerate(self._objectives):
            if objective.until is not None:
                # MLflow metric names cannot hold the objective's name ("x@y>=0.9").
                key = f"{objective.metric}_to_{objective.until.metric}"
                if index in event.reached:
                    self._tracker.log_metrics(run_id, {key: event.reached[index]}, 0)
                else:
                    tags[f"hpsearch.{key}"] = f"{objective.until.label} not reached"
        if event.retries:
            last = event.retries[-1]
            tags["hpsearch.oom_retries"] = len(event.retries)
            tags["hpsearch.ran_with_batch_size"] = last.retry_batch_size
            tags["hpsearch.ran_with_grad_accum_steps"] = last.retry_grad_accum_steps
        if event.outcome is Outcome.PRUNED:
            tags["hpsearch.prune_reason"] = event.prune_reason
            if event.pruned_at is not None:
                tags["hpsearch.pruned_at_step"] = event.pruned_at
        status = RunStatus(event.outcome.run_status)
        if event.oom is not None:
            tags["hpsearch.prune_kind"] = event.oom.prune_kind
            tags.update({f"hpsearch.oom.{k}": v for k, v in event.oom.to_dict().items()})
        self._tracker.set_tags(run_id, tags)
        self._tracker.end_run(run_id, status)

    def on_tick(self, now: float) -> None:
        # A running trial's records go out within a second or two, even while it is quiet.
        self._tracker.flush(FLUSH_S)

    def on_reclaimed(self, event: TrialsReclaimed) -> None:
        end_reclaimed_runs(self._tracker, event.trials, self._study, self._parent)


def end_reclaimed_runs(
    tracker: Tracker,
    trials: Sequence[FrozenTrial],
    study: str,
    parent_run_id: str | None = None,
) -> None:
    """End as KILLED the MLflow runs of trials a dead driver left running, and its parent run.

    With the parent go its other runs still RUNNING: a trial's run the driver
    started but had not yet named on the Optuna trial when it was killed. A trial
    the driver asked for but had not launched has no run: it gets one, KILLED, so
    that every Optuna trial has its run, under the dead search's parent run where
    the reclaimed trials' runs name exactly one (its other trials are there), else
    under ``parent_run_id``, the reclaiming search's, where there is one.
    """
    parents: set[str] = set()
    unlaunched: list[FrozenTrial] = []
    for trial in trials:
        run_id = trial.user_attrs.get(attrs.MLFLOW_RUN)
        # A run the driver started but had not yet named on the trial is found by its
        # trial-number tag (set as the run is created).
        run_ids = [str(run_id)] if run_id else list(tracker.runs_of_trial(study, trial.number))
        if not run_ids:
            unlaunched.append(trial)
        for run in run_ids:
            parent = tracker.end_if_running(run, RunStatus.KILLED)
            if parent:
                parents.add(parent)
    # A rerun reclaims before its own parent run exists: without the dead search's,
    # such a run would stand in the experiment as a search of its own.
    under = next(iter(parents)) if len(parents) == 1 else parent_run_id
    for trial in unlaunched:
        _record_unlaunched(tracker, trial, study, under)
    for parent in parents:
        tracker.end_if_running(parent, RunStatus.KILLED)
        tracker.end_running_children(parent, RunStatus.KILLED)


def _record_unlaunched(
    tracker: Tracker, trial: FrozenTrial, study: str, parent_run_id: str | None
) -> None:
    """A KILLED run for a trial whose driver stopped before it launched it."""
    run_id = tracker.start_run(
        f"trial-{trial.number}",
        params=trial.params,
        tags={TRIAL_NUMBER_TAG: str(trial.number), STUDY_TAG: study},
        parent_run_id=parent_run_id,
    )
    tracker.set_tags(
        run_id,
        {
            "hpsearch.state": TrialState.FAIL.name,
            "hpsearch.error": "its driver stopped before launching it; run again as a new trial",
        },
    )
    tracker.end_run(run_id, RunStatus.KILLED)


def reclaim_stale_trials(handle: StudyHandle, tracker: Tracker) -> int:
    """Fail trials whose driver is gone, enqueue them again, end their MLflow runs as KILLED.

    Also ends the runs of trials already finished in Optuna whose run a driver
    killed between the two writes left RUNNING (as the trial ended there).
    """
    reclaimed = handle.reclaim_stale()
    # Runs of trials Optuna has as finished first, as they ended there; then the
    # dead drivers' runs, the rest of their children with them.
    running = tracker.running_run_ids()
    lost = {trial.number for trial in reclaimed}  # failed just now: their runs are KILLED
    if running:
        for trial in handle.study.get_trials(deepcopy=False, states=_FINISHED_STATES):
            run_id = trial.user_attrs.get(attrs.MLFLOW_RUN)
            if run_id in running and trial.number not in lost:
                # Its last writes may be what was lost (a tracking server's outage):
                # the study's final metrics go with the end.
                _log_final_metrics(tracker, str(run_id), trial)
                tracker.end_if_running(str(run_id), _STATE_STATUS[trial.state])
    end_reclaimed_runs(tracker, reclaimed, handle.name)
    return len(reclaimed)


def record_unwritten_runs(handle: StudyHandle, tracker: Tracker) -> int:
    """The MLflow runs of trials whose search stopped before it could create them.

    A search whose tracking server stayed out of reach past ``tracking.outage_limit``
    marks the trials it opened runs for meanwhile (:data:`~hpsearch.attrs.MLFLOW_UNWRITTEN`).
    Each gets its run here, from what the study holds: params, final metrics, state,
    error, under the stopped search's parent run, which is ended KILLED. What only
    MLflow would have had (per-step metrics, logs) is not recovered. How many runs.
    """
    recorded = 0
    parents: set[str] = set()
    for trial in handle.study.get_trials(deepcopy=False, states=_FINISHED_STATES):
        parent = trial.user_attrs.get(attrs.MLFLOW_UNWRITTEN)
        if parent is None or attrs.MLFLOW_RUN in trial.user_attrs:
            continue
        # Created as the search stopped, maybe; or recorded already by this process.
        runs = tracker.runs_of_trial(handle.name, trial.number)
        if any(status != "RUNNING" for status in runs.values()):
            continue
        run_id = next(iter(runs), None) or tracker.start_run(
            f"trial-{trial.number}",
            params=trial.params,
            tags={TRIAL_NUMBER_TAG: str(trial.number), STUDY_TAG: handle.name},
            parent_run_id=str(parent),
        )
        tags = {
            "hpsearch.state": trial.state.name,
            "hpsearch.recorded_from_study": "its search stopped while the tracking server "
            "was out of reach: params, final metrics and state from the study",
        }
        for key in (attrs.OUTCOME, attrs.ERROR, attrs.PRUNE_REASON):
            if key in trial.user_attrs:
                tags[key] = kept_error(str(trial.user_attrs[key]), MAX_TAG_CHARS)
        tracker.set_tags(run_id, tags)
        _log_final_metrics(tracker, run_id, trial)
        tracker.end_run(run_id, _STATE_STATUS[trial.state])
        handle.set_late(trial, attrs.MLFLOW_RUN, run_id)
        parents.add(str(parent))
        recorded += 1
    for parent in parents:
        tracker.end_if_running(parent, RunStatus.KILLED)
        tracker.end_running_children(parent, RunStatus.KILLED)
    tracker.flush()
    return recorded


def _log_final_metrics(tracker: Tracker, run_id: str, trial: FrozenTrial) -> None:
    """The trial's last value of each metric, as the study holds them."""
    final = trial.user_attrs.get(attrs.METRICS)
    if isinstance(final, dict) and final:
        last = max(trial.intermediate_values, default=-1)
        tracker.log_metrics(
            run_id,
            {k: float(v) for k, v in final.items() if isinstance(v, int | float)},
            last + 1,
        )


_STATE_STATUS = {
    TrialState.COMPLETE: RunStatus.FINISHED,
    TrialState.PRUNED: RunStatus.FINISHED,
    TrialState.FAIL: RunStatus.FAILED,
}
_FINISHED_STATES = tuple(_STATE_STATUS)


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


def _assigned_tags(assigned: Assignment) -> dict[str, str]:
    data = assigned.to_dict()
    tags = {
        f"hpsearch.assigned.{k}": str(v) for k, v in data.items() if k not in ("gpu_ids", "mps")
    }
    tags["hpsearch.gpu_ids"] = ",".join(assigned.gpu_ids) or "none"
    # Its kernels overlapped its neighbours' (MPS) or took turns: its speeds differ.
    tags["hpsearch.mps"] = "on" if assigned.mps_client else "off"
    return tags
