"""What the driver sends a trial worker, and what the worker reports back through Ray Tune.

The driver puts a :class:`TrialSpec` in the Tune config next to the sampled
parameters. The worker answers with Tune results shaped as
``{"hpsearch": {...}, "metrics": {...}}``: a ``report`` event for each
``ctx.report`` call and one ``end`` event when the training function returns or
raises. Only the driver writes to Optuna and MLflow.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

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
    """The throughput knobs in effect (``ctx.record_knobs``): ``info`` has effective and notes."""


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

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for the Tune config."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(**{**data, "objectives": tuple(data["objectives"])})


@dataclass(frozen=True)
class WorkerEvent:
    """One result sent by a worker, decoded in the driver.

    Attributes:
        kind: a step report, or the end of the trial.
        step: the step of a report (or of the last report, at the end).
        metrics: metrics of a report, or final metrics returned by the function.
        outcome: at the end: complete, fail or pruned.
        error: at the end of a failed trial: the exception and its traceback.
        assigned: resources Ray actually assigned to the worker, its node and process id
            (first event and end).
        gpu_load: with ``gpu_load`` events: ``utilization_pct`` and ``memory_mb``.
        info: with ``knobs`` events: ``effective`` (knob to value) and ``notes``;
            at the end of a pruned trial: ``reason``, the trial's own ``TrialPruned``
            text, or ``oom`` (kind, message, step, peak_mb, cap_mb) when it ran out
            of GPU memory; ``retries``: the smaller-batch retries made.
    """

    kind: EventKind
    step: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    outcome: Outcome | None = None
    error: str = ""
    assigned: dict[str, Any] = field(default_factory=dict)
    gpu_load: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def to_result(self) -> dict[str, Any]:
        """The Tune result dict carrying this event."""
        header: dict[str, Any] = {"kind": self.kind.value, "step": self.step}
        if self.outcome is not None:
            header["outcome"] = self.outcome.value
        if self.error:
            header["error"] = self.error
        if self.assigned:
            header["assigned"] = self.assigned
        if self.gpu_load:
            header["gpu_load"] = self.gpu_load
        if self.info:
            header["info"] = self.info
        return {SPEC_KEY: header, METRICS_KEY: dict(self.metrics)}

    @classmethod
    def from_result(cls, result: dict[str, Any]) -> WorkerEvent | None:
        """Decode a Tune result; ``None`` for results not sent by hpsearch's worker."""
        header = result.get(SPEC_KEY)
        if not isinstance(header, dict) or "kind" not in header:
            return None
        outcome = header.get("outcome")
        return cls(
            kind=EventKind(header["kind"]),
            step=header.get("step"),
            metrics=dict(result.get(METRICS_KEY) or {}),
            outcome=Outcome(outcome) if outcome else None,
            error=str(header.get("error", "")),
            assigned=dict(header.get("assigned") or {}),
            gpu_load=dict(header.get("gpu_load") or {}),
            info=dict(header.get("info") or {}),
        )
