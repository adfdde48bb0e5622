"""What the driver sends a trial worker, and what the worker reports back.

The driver puts a :class:`TrialSpec` in the Tune config next to the sampled
parameters. The worker answers with results shaped as
``{"hpsearch": {...}, "metrics": {...}}``: a ``report`` event for each
``ctx.report`` call, ``gpu_load`` and ``knobs`` events when the trial declares
them, and one ``end`` event when the training function returns or raises. Every
payload is a small typed class with ``to_dict``/``from_dict``, so the two sides
share field names in one place. Only the driver writes to Optuna and MLflow.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from hpsearch.oom import BatchRetry, OomReport

PARAMS_KEY = "params"
SPEC_KEY = "hpsearch"
METRICS_KEY = "metrics"


class Outcome(StrEnum):
    """How a trial ended, in the driver's records."""

    COMPLETE = "complete"
    FAIL = "fail"
    PRUNED = "pruned"
    INTERRUPTED = "interrupted"


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


@dataclass(frozen=True)
class TrialSpec:
    """Everything a worker needs besides the parameters.

    Attributes:
        number: the Optuna trial number.
        train: the training function, ``package.module:function``.
        source: the config file (for error messages raised in the worker).
        objectives: the objective metric names (a number returned by ``train`` is
            the value of the only one).
        cpus, gpus: the resources requested for this trial.
        decision_board: name of the Ray actor holding pruning decisions; empty when
            no pruner is configured, and ``ctx.should_prune()`` is then always false.
        memory_cap_mb: the GPU memory this trial may use when it shares a GPU
            (``None``: the whole GPU, or unknown).
        oom_action: ``prune`` or ``retry_smaller_batch`` (``oom.action``).
        max_halvings: the most times ``retry_smaller_batch`` halves the batch.
        gpu_index: the GPU the packing policy chose on the trial's node (the worker
            makes it the only visible one); ``None``: the GPU Ray assigned.
        node: the Ray node id the trial is pinned to (with ``gpu_index``).
        node_address: that node's address (its ``node:<address>`` resource).
        ray_gpus: the GPU amount asked of Ray when it differs from ``gpus``.
        pace_file: where the driver publishes simulated GPUs' speed shares
            (``ctx.simulated_speed_share()``); empty: none.
        timeout_s: the longest the trial may run (``execution.trial_timeout``); past
            it the worker process ends itself with :data:`EXIT_TIMEOUT`.
        stderr_file: where the worker copies the trial's stderr (empty: nowhere), read
            by the driver when the worker dies and attached to the trial's MLflow run.
        stdout_file: where the worker copies the trial's stdout (empty: nowhere).
        seed: the trial's seed (``ctx.seed``).
        checkpoint_dir: the trial's checkpoint folder (``ctx.checkpoint_dir``).
        command: a training script's ``CommandSpec`` as JSON (empty: ``train`` is a function).
        trial_dir: the trial's own folder (a command's ``HPSEARCH_TRIAL_DIR``).
        workdir: the driver's working directory (a command runs there when it exists).
    """

    number: int
    train: str
    source: str
    objectives: tuple[str, ...]
    cpus: float
    gpus: float
    decision_board: str = ""
    memory_cap_mb: float | None = None
    oom_action: str = "prune"
    max_halvings: int = 2
    gpu_index: int | None = None
    node: str | None = None
    node_address: str | None = None
    ray_gpus: float | None = None
    pace_file: str = ""
    timeout_s: float | None = None
    stderr_file: str = ""
    stdout_file: str = ""
    seed: int = 0
    checkpoint_dir: str = ""
    command: str = ""
    trial_dir: str = ""
    workdir: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for the Tune config."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(**{**data, "objectives": tuple(data["objectives"])})


@dataclass(frozen=True)
class Assignment:
    """Where the worker runs: what Ray assigned it, its node and its process.

    Stored on the Optuna trial as ``hpsearch.assigned`` in the dict shape of
    :meth:`to_dict` (``CPU``, ``GPU``, ``gpu_ids``, ``node_id``, ``pid``, and
    ``ray_gpu_ids`` when the packing policy chose another GPU than Ray's).
    """

    cpus: float | None = None
    gpus: float | None = None
    gpu_ids: tuple[str, ...] = ()
    node_id: str | None = None
    pid: int | None = None
    ray_gpu_ids: tuple[str, ...] | None = None

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
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Assignment:
        """Inverse of :meth:`to_dict`."""
        ray_ids = data.get("ray_gpu_ids")
        return cls(
            cpus=_float_or_none(data.get("CPU")),
            gpus=_float_or_none(data.get("GPU")),
            gpu_ids=tuple(str(i) for i in data.get("gpu_ids", ())),
            node_id=data.get("node_id"),
            pid=data.get("pid"),
            ray_gpu_ids=tuple(str(i) for i in ray_ids) if ray_ids is not None else None,
        )

    def shares_gpu_with(self, other: Assignment) -> bool:
        """Whether both run on the same node and see a common GPU."""
        return (
            bool(self.gpu_ids)
            and other.node_id == self.node_id
            and bool(set(self.gpu_ids) & set(other.gpu_ids))
        )


@dataclass(frozen=True)
class GpuLoad:
    """The load a trial declares on its simulated GPU (``ctx.simulate_gpu_load``).

    Attributes:
        utilization_pct: its duty cycle alone on the GPU (0-100).
        memory_mb: the device memory its process holds, CUDA context included.
        sm_share: the share of the GPU's SMs its kernels occupy (what MPS can overlap).
        cpus: the CPUs its process keeps busy (its loop and DataLoader workers).
    """

    utilization_pct: float
    memory_mb: float
    sm_share: float = 1.0
    cpus: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        """Plain dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuLoad:
        """Inverse of :meth:`to_dict`."""
        return cls(
            float(data["utilization_pct"]),
            float(data["memory_mb"]),
            float(data.get("sm_share", 1.0)),
            float(data.get("cpus", 1.0)),
        )


@dataclass(frozen=True)
class KnobReport:
    """The throughput knobs in effect, and why any differ from the sampled parameters."""

    effective: dict[str, Any]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain dict."""
        return {"effective": dict(self.effective), "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KnobReport:
        """Inverse of :meth:`to_dict`."""
        return cls(dict(data.get("effective", {})), tuple(str(n) for n in data.get("notes", ())))


@dataclass(frozen=True)
class EndReport:
    """What the end of a trial says besides its outcome.

    Attributes:
        reason: the trial's own ``TrialPruned`` message, when it pruned itself.
        oom: set when it ran out of memory (it ends PRUNED).
        retries: the smaller-batch retries made before the end.
    """

    reason: str = ""
    oom: OomReport | None = None
    retries: tuple[BatchRetry, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain dict."""
        return {
            "reason": self.reason,
            "oom": self.oom.to_dict() if self.oom is not None else None,
            "retries": [r.to_dict() for r in self.retries],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EndReport:
        """Inverse of :meth:`to_dict`."""
        oom = data.get("oom")
        return cls(
            reason=str(data.get("reason", "")),
            oom=OomReport.from_dict(oom) if oom else None,
            retries=tuple(BatchRetry.from_dict(r) for r in data.get("retries", ())),
        )


@dataclass(frozen=True)
class WorkerEvent:
    """One result sent by a worker, decoded in the driver.

    Attributes:
        kind: which event.
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
    step: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    outcome: Outcome | None = None
    error: str = ""
    assigned: Assignment | None = None
    gpu_load: GpuLoad | None = None
    knobs: KnobReport | None = None
    end: EndReport | None = None

    def to_result(self) -> dict[str, Any]:
        """The Tune result dict carrying this event."""
        header: dict[str, Any] = {"kind": self.kind.value, "step": self.step}
        if self.outcome is not None:
            header["outcome"] = self.outcome.value
        if self.error:
            header["error"] = self.error
        for name in ("assigned", "gpu_load", "knobs", "end"):
            payload = getattr(self, name)
            if payload is not None:
                header[name] = payload.to_dict()
        return {SPEC_KEY: header, METRICS_KEY: dict(self.metrics)}

    @classmethod
    def from_result(cls, result: dict[str, Any]) -> WorkerEvent | None:
        """Decode a Tune result; ``None`` for results not sent by hpsearch's worker."""
        header = result.get(SPEC_KEY)
        if not isinstance(header, dict) or "kind" not in header:
            return None
        outcome = header.get("outcome")
        assigned, load = header.get("assigned"), header.get("gpu_load")
        knobs, end = header.get("knobs"), header.get("end")
        return cls(
            kind=EventKind(header["kind"]),
            step=header.get("step"),
            metrics=dict(result.get(METRICS_KEY) or {}),
            outcome=Outcome(outcome) if outcome else None,
            error=str(header.get("error", "")),
            assigned=Assignment.from_dict(assigned) if assigned else None,
            gpu_load=GpuLoad.from_dict(load) if load else None,
            knobs=KnobReport.from_dict(knobs) if knobs else None,
            end=EndReport.from_dict(end) if end else None,
        )


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)
