"""Optuna's heartbeat for the driver's trials: how often it stamps them, when they are lost.

A driver stamps its running trials alive; a RUNNING trial whose stamp is older
than the grace belongs to a driver that is gone. Another driver (or the next
run) fails it, with the reason, and queues it again with the same parameters, at
most :data:`MAX_LOST_RETRIES` times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpsearch import attrs
from hpsearch.study._budget import retried_numbers

HEARTBEAT_INTERVAL_S = 10
"""How often the driver stamps its running trials as alive (at most; a third of the grace)."""
GRACE_PERIOD_S = 30
"""A RUNNING trial whose stamp is older than this belongs to a driver that is gone
(``study.heartbeat_grace``'s default)."""

MAX_LOST_RETRIES = 2
"""How many times a trial lost with its driver is queued again (then it stays FAIL)."""
INTERRUPTED = "interrupted"
"""The ``hpsearch.outcome`` of a trial that was stopped and runs again (the value of
``hpsearch.trial.protocol.Outcome.INTERRUPTED``, which this layer does not import)."""


def heartbeat_timing(grace_s: float) -> tuple[int, int]:
    """The stamp interval and the grace period, in Optuna's whole seconds, for a grace.

    A driver stamps three times per grace, at most every :data:`HEARTBEAT_INTERVAL_S`.
    """
    grace_period_s = max(3, round(grace_s))
    return min(HEARTBEAT_INTERVAL_S, grace_period_s // 3), grace_period_s


LOST_REASON = (
    "interrupted: its driver stopped (no heartbeat for longer than study.heartbeat_grace); "
    "queued again with the same parameters"
)
"""Why a trial reclaimed from a driver that is gone failed (its ``hpsearch.error``)."""


def requeue_lost(lost: list[FrozenTrial]) -> Callable[[optuna.Study, FrozenTrial], None]:
    """The storage's callback for a stale trial: kept in ``lost`` and queued again
    (:func:`queue_again`)."""

    def stale_trial(study: optuna.Study, trial: FrozenTrial) -> None:
        lost.append(trial)  # its MLflow run is ended by the caller
        queue_again(study, trial)

    return stale_trial


def queue_again(study: optuna.Study, trial: FrozenTrial) -> None:
    """Queue failed ``trial`` to run again, as a trial lost with its driver is.

    The re-run is queued as Optuna's ``RetryHeartbeatStaleTrialCallback`` queues it
    (its system attrs name the lost trial, so ``retried_trial_number`` answers), with
    the lost trial's user attrs but the reason it failed, and ``hpsearch.retry_of``;
    the metrics it ended with, where its driver recorded them, are what the re-run
    starts from (``hpsearch.resumes_metrics``). A configuration whose trial was lost
    ``MAX_LOST_RETRIES + 1`` times (it may be what kills the driver: the host's OOM
    killer) is not queued again (:func:`given_up`), or every rerun would start with it.
    """
    if given_up(trial):
        return
    inherited = {k: v for k, v in trial.user_attrs.items() if k not in (attrs.ERROR, attrs.OUTCOME)}
    if isinstance(ended := inherited.pop(attrs.METRICS, None), dict) and ended:
        inherited[attrs.RESUMES_METRICS] = ended
    study.add_trial(
        optuna.create_trial(
            state=optuna.trial.TrialState.WAITING,
            params=trial.params,
            distributions=trial.distributions,
            user_attrs={**inherited, attrs.RETRY_OF: trial.number},
            system_attrs={
                **trial.system_attrs,
                "failed_trial": trial.number,
                "retry_history": [*_retry_history(trial), trial.number],
            },
        )
    )


def given_up(trial: FrozenTrial) -> bool:
    """Whether ``trial`` is the last of :data:`MAX_LOST_RETRIES` re-runs: not queued again."""
    return len(_retry_history(trial)) >= MAX_LOST_RETRIES


def _retry_history(trial: FrozenTrial) -> list[int]:
    """The trials ``trial`` re-runs, first to last (Optuna's ``retry_history``)."""
    return list(trial.system_attrs.get("retry_history", []))


def unqueued_interruptions(
    trials: Sequence[FrozenTrial], now: datetime, grace_s: float
) -> list[FrozenTrial]:
    """The interrupted trials whose re-run was never queued, of ``trials`` at ``now``.

    A driver that stops a trial sets it FAIL (interrupted), then queues its re-run: two
    writes. One that died between them, or whose disk filled between them, left a FAIL
    trial that counts toward ``n_trials`` and never runs again. Such a trial, failed
    more than ``grace_s`` ago (a live driver queues the re-run at once) and not given
    up on (:func:`given_up`), is queued again as a lost one is (:func:`queue_again`).
    """
    retried = retried_numbers(trials)
    return [
        trial
        for trial in trials
        if trial.state == TrialState.FAIL
        and trial.user_attrs.get(attrs.OUTCOME) == INTERRUPTED
        and trial.number not in retried
        and not given_up(trial)
        and trial.datetime_complete is not None
        and (now - trial.datetime_complete).total_seconds() >= grace_s
    ]
