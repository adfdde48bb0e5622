"""What happens to a trial, as typed events the ledger hands its listeners.

Most events are frozen facts. Two are amendable, and come before the ledger
writes the outcome to Optuna, as Optuna's own ``sampler.after_trial`` does:

* :class:`Opening`: a trial was just asked for; a listener may hold it back
  (the out-of-memory predictor skips a suggestion that cannot fit);
* :class:`Ending`: a trial is about to be told; a listener may amend how it
  ends (a worker killed for host memory is pruned, not failed) and write its
  last user attrs on the live trial.

The events in order for one trial: opening, opened, started, placed, then
reported (and pruned, gpu load, knobs) any number of times, ending,
out-of-memory when it ran out, ended. An interrupted trial ends with
``Outcome.INTERRUPTED`` and is queued again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpsearch.oom import BatchRetry, OomRecord
from hpsearch.placement import Admission
from hpsearch.pruning import Verdict
from hpsearch.telemetry import GpuLoad
from hpsearch.trial.protocol import Assignment, EndReport, KnobReport, Outcome

OPTUNA_STATE = {
    Outcome.COMPLETE: TrialState.COMPLETE,
    Outcome.FAIL: TrialState.FAIL,
    Outcome.PRUNED: TrialState.PRUNED,
    Outcome.INTERRUPTED: TrialState.FAIL,  # failed, and queued again
}
"""The state a trial ends in, in Optuna, for each way it ends."""

ERROR_KEPT_CHARS = 16_000
"""How much of a failed trial's error its study attr keeps (its run's ``error.txt`` keeps
it whole; its MLflow tag, what a tag holds): a script's long stderr lines would make a
large row in the study's database, and MySQL refuses one over 64 KiB."""


def kept_error(error: str, limit: int = ERROR_KEPT_CHARS) -> str:
    """``error`` within ``limit`` characters: its first quarter (where it began) and its
    end (what it says last: a traceback's exception, a script's last stderr lines), cut
    at line breaks where there are some, with what was left out said between."""
    if len(error) <= limit:
        return error
    room = limit - 100  # for the words between
    head, tail = error[: room // 4], error[-(room - room // 4) :]
    head = head[: head.rfind("\n")] if head.rfind("\n") > 0 else head
    tail = tail[tail.find("\n") + 1 :] if 0 <= tail.find("\n") < len(tail) - 1 else tail
    left_out = len(error) - len(head) - len(tail)
    return f"{head}\n[... {left_out} characters left out: the run's error.txt has them ...]\n{tail}"


@dataclass
class Opening:
    """A trial Optuna just suggested, not yet launched; a listener may hold it back.

    Attributes:
        number: the Optuna trial number.
        trial: the live Optuna trial.
        params: the sampled parameters (Optuna's, without the space's constants).
        admission: the resources it would run with.
        skip_reason: set by a listener that holds the trial back (it ends PRUNED
            with this reason, never launched).
        skip_oom: the out-of-memory record that goes with such a skip.
        whole_gpu_reason: set by a listener that knows the trial needs more than a
            share: it waits for a whole GPU, launched when one is free.
    """

    number: int
    trial: optuna.Trial
    params: dict[str, Any]
    admission: Admission
    skip_reason: str = ""
    skip_oom: OomRecord | None = None
    whole_gpu_reason: str = ""

    def skip(self, reason: str, oom: OomRecord | None = None) -> None:
        """Do not launch the trial: it ends PRUNED with ``reason``."""
        self.skip_reason = reason
        self.skip_oom = oom

    def wait_for_whole_gpu(self, reason: str) -> None:
        """Launch the trial only on a whole GPU (it would run out of memory in its share)."""
        self.whole_gpu_reason = reason


@dataclass(frozen=True)
class TrialOpened:
    """A trial was created and will be launched with ``admission``.

    Attributes:
        number: the Optuna trial number.
        params: the sampled parameters.
        admission: its resources, GPU and share.
        trial: the live Optuna trial (a listener may record where it keeps the trial).
        train_params: the training function's parameters (the space's constants included).
        alone_retry_of: when it re-runs, alone on a whole GPU, a trial that ran out
            of memory under a shared cap: that trial's number.
        group: the fused group it trains in (its first trial's number; ``None``: alone).
            A group's members share one launch's resources.
        resumes_run: the MLflow run of the interrupted attempt this trial re-runs.
    """

    number: int
    params: dict[str, Any]
    admission: Admission
    trial: optuna.Trial
    train_params: dict[str, Any]
    alone_retry_of: int | None = None
    group: int | None = None
    resumes_run: str | None = None


@dataclass(frozen=True)
class TrialStarted:
    """The trial's worker started (or the trial is about to end without one): open its records.

    Attributes:
        trial: the live Optuna trial (a listener may record where it keeps the trial).
        params: the training function's parameters (the space's constants included).
        at: when it started.
        resumes_run: the MLflow run of the interrupted attempt this trial re-runs.
        group: the fused group it trains in (its first trial's number; ``None``: alone).
    """

    number: int
    trial: optuna.Trial
    params: dict[str, Any]
    admission: Admission
    at: float
    resumes_run: str | None = None
    group: int | None = None


@dataclass(frozen=True)
class TrialPlaced:
    """The worker said where it runs (its first event)."""

    number: int
    assigned: Assignment
    started_at: float


@dataclass
class Measured:
    """What a trial just reported (a step, or train's return), before anyone records it.

    A listener may add metrics derived from it (:meth:`derive`): they are recorded
    with it, and objectives and the pruner read them.

    Attributes:
        number: the Optuna trial number.
        metrics: what the trial reported.
        since: when the interval it measured began (its previous report, or its start).
        at: now.
        derived: metrics listeners derived from these.
    """

    number: int
    metrics: dict[str, float]
    since: float
    at: float
    derived: dict[str, float] = field(default_factory=dict)

    def derive(self, metrics: dict[str, float]) -> None:
        """Record ``metrics`` with the trial's own (they never replace what it reported)."""
        for name, value in metrics.items():
            if name not in self.metrics:
                self.derived[name] = value


@dataclass(frozen=True)
class TrialReported:
    """One ``ctx.report``, with the pruner's verdict on it.

    Attributes:
        first: the trial's first report (it is past its warm-up).
        verdict: whether the pruner says to stop after this step.
        sharing: the trial processes running on its GPU when it reported, its own
            included (a fused group is one; 0: no GPU); what it measured of its own
            speed was measured so.
    """

    number: int
    step: int
    metrics: dict[str, float]
    first: bool
    verdict: Verdict
    sharing: int = 0


@dataclass(frozen=True)
class TrialPruned:
    """The pruner said, for the first time, to stop the trial after ``step``."""

    number: int
    step: int
    reason: str


@dataclass(frozen=True)
class GpuLoadDeclared:
    """The trial declared the load it puts on its simulated GPU."""

    number: int
    load: GpuLoad


@dataclass(frozen=True)
class KnobsReported:
    """The throughput knobs in effect for the trial."""

    number: int
    knobs: KnobReport


@dataclass
class Ending:
    """A trial about to be told to Optuna; listeners may amend how it ends.

    Attributes:
        number: the Optuna trial number.
        trial: the live Optuna trial (last user attrs go here).
        params: the sampled parameters, with those an Optuna objective suggested in
            its worker (the configuration that ran, to judge an out-of-memory end by).
        admission: what it ran with.
        outcome: how it ends.
        error: why it failed.
        crash: the runner's error when the worker died without an end event.
        report: the worker's end report (its own prune reason, an OOM, retries).
        co_tenants: other trial processes on its GPU when it ended (its fused
            group's members are not: they share its process).
        alone_retry_of: the trial it re-runs alone on a whole GPU, if any.
        last_step: its last reported step.
        prune_reason: why it was pruned (the pruner's verdict, or an amendment).
        pruned_at: the step at which it was pruned.
        oom: set when it ended for memory (by the out-of-memory handling).
        peak_memory_mb: its process's peak GPU memory, where a monitor measured it.
    """

    number: int
    trial: optuna.Trial
    params: dict[str, Any]
    admission: Admission
    outcome: Outcome
    error: str = ""
    crash: str | None = None
    report: EndReport | None = None
    co_tenants: int = 0
    alone_retry_of: int | None = None
    last_step: int | None = None
    prune_reason: str = ""
    pruned_at: int | None = None
    oom: OomRecord | None = None
    peak_memory_mb: float | None = None


@dataclass(frozen=True)
class TrialOutOfMemory:
    """The trial ran out of memory on its GPU (after the ending was settled)."""

    number: int
    admission: Admission
    oom: OomRecord
    sharing: int
    at: float


@dataclass(frozen=True)
class TrialEnded:
    """The trial is over and Optuna has been told.

    Attributes:
        outcome: how it ended (``INTERRUPTED``: stopped with the search, queued again).
        values: the objective values of a complete trial.
        metrics: the final value of every metric it reported.
        end_metrics: the metrics its training function returned.
        params: the training function's parameters.
        user_attrs: what its own code set on it (an Optuna objective's ``set_user_attr``).
        stop_search: why it asked the search to start no more trials; empty: it did not.
        duration_s: seconds from its start to its end.
        error: why it failed.
        last_step: its last reported step.
        pruned_at, prune_reason: for a pruned trial.
        reached: for objectives with ``until``: index to the value where the target was reached.
        oom: the out-of-memory record of a trial pruned for memory.
        retries: smaller-batch retries made before the end.
        peak_memory_mb: its process's peak GPU memory, where a monitor measured it.
        checkpoint_dir: its checkpoint folder (shared with its re-runs).
    """

    number: int
    outcome: Outcome
    values: tuple[float, ...] | None
    metrics: dict[str, float]
    end_metrics: dict[str, float]
    params: dict[str, Any]
    admission: Admission
    duration_s: float
    error: str = ""
    last_step: int | None = None
    pruned_at: int | None = None
    prune_reason: str = ""
    reached: dict[int, float] = field(default_factory=dict)
    oom: OomRecord | None = None
    retries: tuple[BatchRetry, ...] = ()
    peak_memory_mb: float | None = None
    checkpoint_dir: str = ""
    user_attrs: dict[str, Any] = field(default_factory=dict)
    stop_search: str = ""


@dataclass(frozen=True)
class TrialsReclaimed:
    """Trials left running by a driver that is gone were failed and queued again."""

    trials: tuple[FrozenTrial, ...]
