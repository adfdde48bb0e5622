"""The ledger's writes to Optuna: what a trial ran with, and how it ended, told to the study.

Only the ledger writes to the study, and only through :class:`StudyWrites`; the
listeners write MLflow. An interrupted trial is queued again with its seed, its
checkpoint folder and a link to its earlier run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

from hpsearch import attrs
from hpsearch._compat import tell_optuna
from hpsearch.lifecycle._events import Ending, kept_error
from hpsearch.pruning import PruneJudge
from hpsearch.study import StudyHandle, set_user_attrs
from hpsearch.trial.protocol import Assignment, KnobReport, Outcome


class StudyWrites:
    """What the ledger records on the study's trials.

    Args:
        handle: the study.
        judge: the pruning judge, told of each trial's end (``None``: no pruner).
        sole_writer: no trial's worker writes to the study (an Optuna objective's does,
            through the study served to it), so a trial is told from the copy of it this
            process holds, without reading it back first (``tell_optuna``'s ``held``).
    """

    def __init__(
        self, handle: StudyHandle, judge: PruneJudge | None, *, sole_writer: bool = False
    ) -> None:
        self._handle = handle
        self._judge = judge
        self._held = sole_writer

    @staticmethod
    def group(trial: optuna.Trial, group: int, size: int) -> None:
        """The fused group the trial trains in: its first trial's number, and its size."""
        trial.set_user_attr(attrs.FUSED_GROUP, {"group": group, "members": size})

    @staticmethod
    def admitted(
        trial: optuna.Trial, resources: dict[str, Any], seed: int | None, checkpoint_dir: str
    ) -> None:
        """The resources the policy admitted the trial with, and why; and a new trial's seed
        and checkpoint folder (``seed`` ``None``: a re-run, which inherited both), in one
        write."""
        written: dict[str, Any] = {attrs.RESOURCES: resources}
        if seed is not None:
            written.update({attrs.SEED: seed, attrs.CHECKPOINT_DIR: checkpoint_dir})
        set_user_attrs(trial, written)

    @staticmethod
    def worker_said(
        trial: optuna.Trial, assigned: Assignment | None, knobs: KnobReport | None
    ) -> None:
        """Where its worker runs, and the throughput knobs in effect: what one of its
        events brought (the first carries the assignment, often with the knobs), in one
        write."""
        written: dict[str, Any] = {}
        if assigned is not None:
            written[attrs.ASSIGNED] = assigned.to_dict()
        if knobs is not None:
            written[attrs.KNOBS] = knobs.to_dict()
        set_user_attrs(trial, written)

    def ended(
        self,
        ending: Ending,
        *,
        values: tuple[float, ...] | None,
        metrics: dict[str, float],
        duration_s: float,
    ) -> str:
        """Record how the trial ended and tell Optuna; the prune reason recorded (or ``""``)."""
        trial, outcome = ending.trial, ending.outcome
        written: dict[str, Any] = {
            attrs.METRICS: metrics,
            attrs.OUTCOME: outcome.value,
            attrs.DURATION: round(duration_s, 3),
        }
        if ending.error:
            written[attrs.ERROR] = kept_error(ending.error)
        reason = ""
        if outcome is Outcome.PRUNED:
            reason = _prune_reason(ending)
            written[attrs.PRUNE_REASON] = reason
            if ending.pruned_at is not None:
                written[attrs.PRUNED_AT] = ending.pruned_at
        set_user_attrs(trial, written)
        self._tell(trial, outcome, values)
        return reason

    def retry_later(
        self,
        trial: optuna.Trial,
        params: dict[str, Any],
        seed: int,
        checkpoint_dir: str,
        metrics: Mapping[str, float],
    ) -> None:
        """Queue an interrupted trial again: same parameters, seed and checkpoints, and the
        metrics it reported last (``metrics``) to start from."""
        kept: dict[str, Any] = {attrs.SEED: seed, attrs.CHECKPOINT_DIR: checkpoint_dir}
        earlier = trial.user_attrs.get(attrs.MLFLOW_RUN)
        if earlier:
            kept[attrs.RESUMES_RUN] = earlier
        reported = {k: v for k, v in metrics.items() if math.isfinite(v)}  # JSON, as stored
        if reported:
            kept[attrs.RESUMES_METRICS] = reported
        self._handle.retry_later(trial.number, params, kept)

    def _tell(
        self, trial: optuna.Trial, outcome: Outcome, values: tuple[float, ...] | None
    ) -> None:
        """End the trial in Optuna (and in the pruning judge's memory)."""
        if outcome is Outcome.COMPLETE and values is not None:
            state = TrialState.COMPLETE
            tell_optuna(self._handle.study, trial, list(values), held=self._held)
        else:
            state = TrialState.PRUNED if outcome is Outcome.PRUNED else TrialState.FAIL
            tell_optuna(self._handle.study, trial, state=state, held=self._held)
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
