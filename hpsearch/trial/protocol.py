"""What a runner launches, and what a trial's worker reports back: the typed seam.

The scheduler answers a runner with a :class:`TrialLaunch` (or a hold): the
trials one worker runs (one, or several fused), the settings every trial of the
search shares, the resources the policy admitted. The worker answers with
:class:`WorkerEvent`\\ s: a ``report`` for each ``ctx.report``, ``gpu_load`` and
``knobs`` when the trial declares them, and one ``end`` when the training
function returns or raises.

Every class here is typed end to end; the plain dicts a runner must pass
through (Ray Tune's config and results) exist only inside that runner, made
and read by :func:`dump_launch`/:func:`load_launch` and
:func:`dump_event`/:func:`load_event` (pydantic, not hand-written pairs). Only
the driver writes the search's records to Optuna and MLflow; what a trial's own
code logs to MLflow goes to runs of its own (:class:`TrialTracking`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter

from hpsearch.oom import BatchRetry, OomReport, OomSpec, memory_cap_mb
from hpsearch.placement import Admission
from hpsearch.telemetry import GpuLoad
from hpsearch.trial.other_tools import StudyAccess, TuneTrainableSpec
from hpsearch.trial.script import CommandSpec

EVENT_KEY = "hpsearch_event"
"""The key of a worker's event in a Tune result (Tune adds keys of its own beside it)."""


class Outcome(StrEnum):
    """How a trial ended, in the driver's records."""

    COMPLETE = "complete"
    FAIL = "fail"
    PRUNED = "pruned"
    INTERRUPTED = "interrupted"

    @property
    def run_status(self) -> str:
        """The MLflow status of the runs of a trial that ended so: the driver's run of it,
        and the runs its own code opened."""
        return _RUN_STATUS[self]


# A pruned trial is a finished answer (the search chose to stop it), told apart by
# its hpsearch.state tag; KILLED, red in the UI, is kept for interrupted trials.
_RUN_STATUS = {
    Outcome.COMPLETE: "FINISHED",
    Outcome.FAIL: "FAILED",
    Outcome.PRUNED: "FINISHED",
    Outcome.INTERRUPTED: "KILLED",
}


class EventKind(StrEnum):
    """The kind of a result a worker sends."""

    REPORT = "report"
    END = "end"
    GPU_LOAD = "gpu_load"
    """The trial declares the load it puts on its (simulated) GPU: ``ctx.simulate_gpu_load``."""
    KNOBS = "knobs"
    """The throughput knobs in effect (``ctx.record_knobs``)."""


EXIT_TIMEOUT = 124
"""The exit code of a worker that ended itself past its trial's time limit (as ``timeout``'s)."""
EXIT_HUNG = 125
"""The exit code of a worker that ended itself because its trial was still (it did not run
at all, and did not report) for ``execution.hang_timeout``."""
HUNG_SAID = "(execution.hang_timeout): hung; ending its worker"
"""How the line a hung trial's worker writes to its stderr as it ends itself ends: what
tells the driver where no reaper caught the exit code (a cluster joined by address)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TrialTracking(_Frozen):
    """Where the MLflow calls of a trial's own code go: the search's store and experiment,
    in runs nested under the trial's run (:mod:`hpsearch.worker` sets them up).

    Attributes:
        uri: the search's tracking URI (``tracking.uri``, a SQLite file's path absolute).
        experiment: the search's MLflow experiment.
        study: the study's name (a trial's run is found by it and the trial's number).
    """

    uri: str
    experiment: str
    study: str


class TrialSettings(_Frozen):
    """What every trial of a search runs with: the config's settings, and the root's parts.

    Built once, by the composition root; no field has a default here (each
    setting is declared once, in the config section it comes from).

    Attributes:
        train: the training function, ``package.module:function`` (empty for a script).
        command: the training script of ``train: {command: ...}`` (``None``: a function).
        source: the config file (for error messages raised in the worker).
        objectives: the objective metric names (a number returned by ``train`` is
            the value of the only one).
        oom: the config's ``oom`` section.
        timeout_s: the longest a trial may run (``execution.trial_timeout``); past it
            the worker process ends itself with :data:`EXIT_TIMEOUT`.
        hang_s: how long a trial may be still (``execution.hang_timeout``); past it the
            worker process ends itself with :data:`EXIT_HUNG`.
        decision_board: name of the Ray actor holding pruning decisions; empty when
            no pruner is configured (``ctx.should_prune()`` is then always false).
        pace_file: where the driver publishes simulated GPUs' speed shares
            (``ctx.simulated_speed_share()``); empty: none.
        worker_dir: a folder the driver shares with the workers of its machine: each
            trial's stdout and stderr, each worker's exit (for a crash's record).
        workdir: the driver's working directory (a command runs there when it exists).
        gpu_memory_mb: each GPU's memory (the smallest of the search's), to turn a
            share into a memory cap and to tell a trial its GPU's size; ``None``: unknown.
        fused_train: the function that trains a fused launch's members
            (``fusion.train``; empty: fusion off).
        study_access: how an Optuna objective's trial reaches the driver's study
            (``train: {optuna: ...}``, whose objective ``train`` then names; ``None``:
            a training function or script).
        tune_trainable: ``train: {tune: ...}``, where ``train`` names a Ray Tune trainable
            (``None``: anything else).
        tracking: where the MLflow calls of the trial's own code go (``None``: where
            MLflow's defaults send them).
        by_value: the functions ``train`` and ``fused_train`` name that a dict config
            held itself and no worker could import by name: cloudpickle's bytes in base64,
            by name (:mod:`hpsearch.adapters`); empty for a config file.
    """

    train: str
    command: CommandSpec | None
    source: str
    objectives: tuple[str, ...]
    oom: OomSpec
    timeout_s: float | None
    hang_s: float | None
    decision_board: str
    pace_file: str
    worker_dir: str
    workdir: str
    gpu_memory_mb: float | None
    fused_train: str
    study_access: StudyAccess | None
    tune_trainable: TuneTrainableSpec | None
    tracking: TrialTracking | None
    by_value: dict[str, str]


class MemberSpec(_Frozen):
    """One trial of a launch: which Optuna trial, its parameters, its seed and folders.

    Attributes:
        number: the Optuna trial number.
        params: the training function's parameters (the space's constants included).
        seed: the trial's seed (``ctx.seed``).
        checkpoint_dir: its checkpoint folder (``ctx.checkpoint_dir``), shared with its re-runs.
        trial_dir: its own folder (a command's ``HPSEARCH_TRIAL_DIR``).
    """

    number: int
    params: dict[str, Any]
    seed: int
    checkpoint_dir: str
    trial_dir: str


class TrialLaunch(_Frozen):
    """What a runner starts: one worker running one trial (or several fused into one).

    Attributes:
        members: the trials it runs; one, unless fused.
        settings: what every trial of the search runs with.
        admission: the resources the policy admitted it with, and where.
        stdout_file, stderr_file: where the worker copies its output (empty:
            nowhere), read by the driver when the worker dies and attached to the
            trials' MLflow runs.
    """

    members: tuple[MemberSpec, ...]
    settings: TrialSettings
    admission: Admission
    stdout_file: str
    stderr_file: str

    @property
    def trial(self) -> MemberSpec:
        """The launch's only trial (a launch of several is fused)."""
        if len(self.members) != 1:
            raise ValueError(f"a launch of {len(self.members)} fused trials has no single trial")
        return self.members[0]

    @property
    def memory_cap_mb(self) -> float | None:
        """The GPU memory its trials may use when they share a GPU (``None``: whole, unknown)."""
        return memory_cap_mb(self.admission.gpus, self.settings.gpu_memory_mb)

    @property
    def ray_gpus(self) -> float:
        """The GPU amount asked of the runner (its own account may differ from the share)."""
        admission = self.admission
        return admission.ray_gpus if admission.ray_gpus is not None else admission.gpus


@dataclass(frozen=True)
class Assignment:
    """Where the worker runs: what Ray assigned it, its node and its process.

    Stored on the Optuna trial as ``hpsearch.assigned`` in the dict shape of
    :meth:`to_dict` (Ray's resource names ``CPU`` and ``GPU``, ``gpu_ids``,
    ``node_id``, ``pid``, and ``ray_gpu_ids`` when the packing policy chose another
    GPU than Ray's): a record format read back from studies of any age.
    """

    cpus: float | None = None
    gpus: float | None = None
    gpu_ids: tuple[str, ...] = ()
    node_id: str | None = None
    pid: int | None = None
    ray_gpu_ids: tuple[str, ...] | None = None
    mps_client: bool = False
    """Its CUDA went through the search's MPS daemon for its GPU."""

    def to_dict(self) -> dict[str, Any]:
        """The stored shape."""
        data: dict[str, Any] = {}
        if self.cpus is not None:
            data["CPU"] = self.cpus
        if self.gpus is not None:
            data["GPU"] = self.gpus
        data["gpu_ids"] = list(self.gpu_ids)
        data["node_id"] = self.node_id
        data["pid"] = self.pid
        if self.ray_gpu_ids is not None:
            data["ray_gpu_ids"] = list(self.ray_gpu_ids)
        if self.mps_client:
            data["mps"] = True
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Assignment:
        """Read the stored shape."""
        ray_ids = data.get("ray_gpu_ids")
        return cls(
            cpus=_float_or_none(data.get("CPU")),
            gpus=_float_or_none(data.get("GPU")),
            gpu_ids=tuple(str(i) for i in data.get("gpu_ids", ())),
            node_id=data.get("node_id"),
            pid=data.get("pid"),
            ray_gpu_ids=tuple(str(i) for i in ray_ids) if ray_ids is not None else None,
            mps_client=bool(data.get("mps", False)),
        )

    def shares_gpu_with(self, other: Assignment) -> bool:
        """Whether both run on the same node and see a common GPU."""
        return (
            bool(self.gpu_ids)
            and other.node_id == self.node_id
            and bool(set(self.gpu_ids) & set(other.gpu_ids))
        )


@dataclass(frozen=True)
class KnobReport:
    """The throughput knobs in effect, and why any differ from the sampled parameters."""

    effective: dict[str, Any]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The stored shape (``hpsearch.knobs`` on the Optuna trial)."""
        return {"effective": dict(self.effective), "notes": list(self.notes)}


@dataclass(frozen=True)
class EndReport:
    """What the end of a trial says besides its outcome.

    Attributes:
        reason: the trial's own ``TrialPruned`` message, when it pruned itself.
        oom: set when it ran out of memory (it ends PRUNED).
        retries: the smaller-batch retries made before the end.
        fused_oom_at: the size of the fused group that ran out of memory before this
            member's group was split (``None``: none did).
        stop_search: why the trial asked the search to start no more trials
            (``ctx.stop_search``, an objective's ``study.stop()``); empty: it did not.
        unread: the objectives a completed script reported nowhere but named in its
            output with more than a number (``Accuracy: 9842/10000 (98%)``), each with
            the last line that named it (the part around the name): what its failure
            makes a pattern of.
    """

    reason: str = ""
    oom: OomReport | None = None
    retries: tuple[BatchRetry, ...] = ()
    fused_oom_at: int | None = None
    stop_search: str = ""
    unread: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class WorkerEvent:
    """One event a worker sends, as the driver reads it.

    Attributes:
        kind: which event.
        member: which trial of a fused launch it is about (its number); ``None``: the
            launch's only trial.
        step: the step of a report.
        metrics: metrics of a report, or final metrics returned by the function.
        outcome: at the end: complete, fail or pruned.
        error: at the end of a failed trial: the exception and its traceback.
        assigned: where the worker runs (on its first event and at the end).
        gpu_load: with ``gpu_load`` events.
        knobs: with ``knobs`` events.
        end: at the end: the trial's own prune reason, an out-of-memory, retries.
    """

    kind: EventKind
    member: int | None = None
    step: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    outcome: Outcome | None = None
    error: str = ""
    assigned: Assignment | None = None
    gpu_load: GpuLoad | None = None
    knobs: KnobReport | None = None
    end: EndReport | None = None


_EVENT = TypeAdapter(WorkerEvent)


def dump_launch(launch: TrialLaunch) -> dict[str, Any]:
    """A launch as plain data, for a runner that passes dicts (Ray Tune's config)."""
    return launch.model_dump(mode="json")


def load_launch(data: dict[str, Any]) -> TrialLaunch:
    """The launch :func:`dump_launch` wrote."""
    return TrialLaunch.model_validate(data)


def dump_event(event: WorkerEvent) -> dict[str, Any]:
    """An event as plain data, for a runner that passes dicts (Ray Tune's results)."""
    data: dict[str, Any] = _EVENT.dump_python(event, mode="json", exclude_defaults=True)
    return data


def load_event(data: dict[str, Any]) -> WorkerEvent:
    """The event :func:`dump_event` wrote."""
    return _EVENT.validate_python(data)


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)
