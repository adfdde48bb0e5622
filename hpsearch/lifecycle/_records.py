"""One open trial as the ledger keeps it, and what a worker's death says about how it ended."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from hpsearch import attrs
from hpsearch.lifecycle._deadline import KILL_GRACE_S, hung_error, past_limit, timeout_error
from hpsearch.lifecycle._events import Ending, TrialEnded, TrialOpened, TrialStarted
from hpsearch.lifecycle._launches import Launches
from hpsearch.placement import Admission
from hpsearch.trial.death import (
    NODE_LOST,
    WorkerExit,
    node_lost,
    output_tail,
    stderr_file,
    worker_death,
    worker_exit,
)
from hpsearch.trial.protocol import (
    EXIT_HUNG,
    HUNG_SAID,
    Assignment,
    MemberSpec,
    Outcome,
    TrialSettings,
    WorkerEvent,
)


@dataclass
class OpenTrial:
    """A trial asked of Optuna and not yet told: what it runs with, what its worker said.

    Attributes:
        number: the Optuna trial number.
        trial: the live Optuna trial.
        sampled: the parameters Optuna sampled.
        params: the training function's parameters (the space's constants included).
        admission: its resources.
        seed, checkpoint_dir: its seed and checkpoint folder (a re-run keeps its original's).
        resumes_run: the MLflow run of the interrupted attempt it re-runs.
        alone_retry_of: the trial it re-runs alone on a whole GPU, if any.
        waited_for_whole_gpu: why it waited for a whole GPU (empty: it did not).
        group: the fused group it trains in (its first trial's number; ``None``: alone).
        define_by_run: its objective suggests parameters of its own in the worker (an
            Optuna objective): they are read back from the study when it ends.
    """

    number: int
    trial: optuna.Trial
    sampled: dict[str, Any]
    params: dict[str, Any]
    admission: Admission
    seed: int
    checkpoint_dir: str
    resumes_run: str | None = None
    alone_retry_of: int | None = None
    waited_for_whole_gpu: str = ""
    group: int | None = None
    define_by_run: bool = False
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

    @classmethod
    def asked(
        cls,
        trial: optuna.Trial,
        sampled: dict[str, Any],
        params: dict[str, Any],
        admission: Admission,
        launches: Launches,
    ) -> OpenTrial:
        """A trial Optuna just handed out.

        A re-run of an interrupted trial (queued by the ledger, or by Optuna's
        heartbeat callback, which copies the lost trial's attrs) keeps its seed and
        checkpoints, and links to its earlier MLflow run.
        """
        inherited = trial.user_attrs  # read once: a live trial's user_attrs is a query
        number = trial.number
        return cls(
            number=number,
            trial=trial,
            sampled=sampled,
            params=params,
            admission=admission,
            seed=inherited.get(attrs.SEED, launches.seed_of(number)),
            checkpoint_dir=inherited.get(attrs.CHECKPOINT_DIR, launches.checkpoint_dir(number)),
            resumes_run=inherited.get(attrs.MLFLOW_RUN) or inherited.get(attrs.RESUMES_RUN),
            # What the interrupted attempt reported stands until the re-run reports anew.
            metrics=dict(inherited.get(attrs.RESUMES_METRICS) or {}),
            alone_retry_of=inherited.get(attrs.ALONE_RETRY_OF),
            define_by_run=launches.settings.study_access is not None,
        )

    def _all_params(self, stored: FrozenTrial | None = None) -> dict[str, Any]:
        """Its parameters, with those its objective suggested in the worker (define-by-run;
        ``stored``: the trial as read from storage already)."""
        if not self.define_by_run:
            return dict(self.params)
        stored = stored if stored is not None else self._stored()
        return {**self.params, **stored.params}

    def _stored(self) -> FrozenTrial:
        """The trial as storage holds it: what an objective's worker wrote (define-by-run)."""
        return self.trial.storage.get_trial(self.trial._trial_id)

    def _code_attrs(self, stored: FrozenTrial | None) -> dict[str, Any]:
        """What its own code set on it (an objective's ``set_user_attr``, made in the worker)."""
        return attrs.code_attrs(stored.user_attrs) if stored is not None else {}

    @property
    def inherits_seed(self) -> bool:
        """Whether the trial re-runs another (its seed was recorded before)."""
        return attrs.SEED in self.trial.user_attrs

    def member(self, launches: Launches) -> MemberSpec:
        """The trial as a launch runs it."""
        return launches.member(self.number, self.params, self.seed, self.checkpoint_dir)

    def opened(self) -> TrialOpened:
        """What listeners are told when it is launched."""
        return TrialOpened(
            self.number,
            self.sampled,
            self.admission,
            self.trial,
            self.params,
            self.alone_retry_of,
            self.group,
            self.resumes_run,
        )

    def started(self, now: float) -> TrialStarted:
        """What listeners are told when its worker started (``now`` if it has not yet)."""
        at = self.started_at if self.started_at is not None else now
        return TrialStarted(
            self.number, self.trial, self.params, self.admission, at, self.resumes_run, self.group
        )

    def resources(self) -> dict[str, Any]:
        """What it runs with and why (the ``hpsearch.resources`` attr)."""
        admission = self.admission
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
        if self.waited_for_whole_gpu:
            resources["waits_for_whole_gpu"] = self.waited_for_whole_gpu
        return resources

    def sharing(self, open_trials: Iterable[OpenTrial]) -> int:
        """Trial processes on its GPU now, its own included (0: it has no GPU).

        A fused group is one process: its members count once, as the group's (what
        a member's OOM is shared with, and how many take turns on the GPU).
        """
        if self.assigned is None or not self.assigned.gpu_ids:
            return 0
        others = {
            o.process for o in open_trials if o.process != self.process and o.shares_gpu_with(self)
        }
        return 1 + len(others)

    @property
    def process(self) -> int:
        """The process it trains in: its fused group's, or its own trial number."""
        return self.number if self.group is None else self.group

    def shares_gpu_with(self, other: OpenTrial) -> bool:
        """Whether both run on one GPU (as their workers said)."""
        mine, theirs = self.assigned, other.assigned
        return mine is not None and theirs is not None and mine.shares_gpu_with(theirs)

    def ending(self, outcome: Outcome, error: str = "", co_tenants: int = 0) -> Ending:
        """How it is about to end, for listeners to amend."""
        return Ending(
            number=self.number,
            trial=self.trial,
            # Define-by-run: what Optuna sampled in the driver is not the configuration.
            params=self._all_params() if self.define_by_run else self.sampled,
            admission=self.admission,
            outcome=outcome,
            error=error,
            co_tenants=co_tenants,
            alone_retry_of=self.alone_retry_of,
            last_step=self.last_step,
            prune_reason=self.prune_reason,
            pruned_at=self.pruned_at,
        )

    def ended(
        self,
        ending: Ending,
        values: tuple[float, ...] | None,
        duration_s: float,
        prune_reason: str,
    ) -> TrialEnded:
        """The event of its end, once Optuna has been told."""
        outcome = ending.outcome
        stored = self._stored() if self.define_by_run else None  # read once, for both
        return TrialEnded(
            number=self.number,
            outcome=outcome,
            values=values,
            metrics=dict(self.metrics),
            end_metrics=dict(self.end.metrics) if self.end is not None else {},
            params=self._all_params(stored),
            user_attrs=self._code_attrs(stored),
            stop_search=self.end.end.stop_search if self.end and self.end.end else "",
            admission=self.admission,
            duration_s=duration_s,
            error=ending.error,
            last_step=self.last_step,
            pruned_at=ending.pruned_at if outcome is Outcome.PRUNED else None,
            prune_reason=prune_reason,
            reached=dict(self.reached),
            oom=ending.oom,
            retries=ending.report.retries if ending.report is not None else (),
            peak_memory_mb=ending.peak_memory_mb,
            checkpoint_dir=self.checkpoint_dir,
        )


@dataclass(frozen=True)
class Death:
    """How a trial whose worker died without an end event ended, and the evidence.

    Attributes:
        outcome: interrupted (its node was lost: not the trial's fault) or failed.
        error: why, for the records.
        evidence: what the host-OOM check reads: the runner's word and how the
            worker ended (``None``: not a failure).
    """

    outcome: Outcome
    error: str
    evidence: str | None = None


def worker_died(record: OpenTrial, crash: str, settings: TrialSettings, now: float) -> Death:
    """Why ``record``'s worker died, from the runner's error, its stderr and its exit."""
    if node_lost(crash):
        # Not the trial's fault: it runs again (from its last checkpoint) next run.
        reason = f"{NODE_LOST}; it runs again, from its last checkpoint\nRay: {crash}"
        return Death(Outcome.INTERRUPTED, reason)
    pid = record.assigned.pid if record.assigned is not None else None
    ended = worker_exit(settings.worker_dir, pid)
    evidence = crash if ended is None else f"{ended.describe()}\n{crash}"
    stderr = stderr_file(settings.worker_dir, record.number)
    limit = settings.timeout_s
    if limit is not None and past_limit(record.started_at, limit, now):
        killed = past_limit(record.started_at, limit, now, KILL_GRACE_S)
        error = timeout_error(limit, record.last_step, killed)
    elif settings.hang_s is not None and _ended_hung(ended, stderr):
        error = hung_error(settings.hang_s, record.last_step)
    else:
        error = worker_death(crash, stderr, ended)
    return Death(Outcome.FAIL, error, evidence)


def _ended_hung(ended: WorkerExit | None, stderr: str) -> bool:
    """Whether a worker ended itself for its trial being still: its exit code says so, or,
    where no reaper caught the code, the last line it wrote."""
    if ended is not None:
        return ended.code == EXIT_HUNG
    said = (output_tail(stderr, limit=4096) if stderr else None) or ""
    return HUNG_SAID in said.rstrip().rpartition("\n")[2]
