"""The vocabulary of out-of-memory handling: what a worker reports, a known case, the stored
record, a verdict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

PREDICTED = "predicted"
"""The ``kind`` of a record for a suggestion that was not launched (``predicted_oom``)."""


@dataclass(frozen=True)
class OomReport:
    """A trial ran out of memory: what said so, where, and how much it held.

    Attributes:
        kind: ``torch``, ``message`` or ``library`` (the device), ``host`` (the
            worker was killed for host memory).
        message: the first line of the error, or the evidence of a host kill.
        step: the last step reported before it (``None``: before the first report).
        peak_mb: the trial's peak device memory, when known.
        cap_mb: the memory cap it ran under (``None``: the whole GPU).
    """

    kind: str
    message: str
    step: int | None = None
    peak_mb: float | None = None
    cap_mb: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OomReport:
        """Inverse of :meth:`to_dict`."""
        return cls(
            kind=str(data["kind"]),
            message=str(data.get("message", "")),
            step=data.get("step"),
            peak_mb=_float_or_none(data.get("peak_mb")),
            cap_mb=_float_or_none(data.get("cap_mb")),
        )


@dataclass(frozen=True)
class BatchRetry:
    """One smaller-batch retry after an out-of-memory (``oom.action: retry_smaller_batch``)."""

    step: int | None
    batch_size: int
    retry_batch_size: int
    retry_grad_accum_steps: int | None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (the shape of ``hpsearch.oom_retries`` on the Optuna trial)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchRetry:
        """Inverse of :meth:`to_dict`."""
        return cls(
            data.get("step"),
            int(data["batch_size"]),
            int(data["retry_batch_size"]),
            data.get("retry_grad_accum_steps"),
        )


@dataclass(frozen=True)
class OomCase:
    """A configuration that ran out of memory, as the predictor keeps it."""

    number: int
    params: Mapping[str, Any]
    memory_cap_mb: float | None = None


@dataclass(frozen=True)
class OomRecord:
    """What hpsearch stores about a trial pruned for memory (``hpsearch.oom`` on the trial).

    Attributes:
        report: what ran out, where and how much it held (``None`` for a prediction).
        gpus: the GPU share the trial held.
        co_tenants: trials that shared its GPU when it ran out.
        infeasible: the configuration is judged unable to fit.
        retries: the smaller-batch retries made before the end.
        alone_retry_of: on the re-run alone on a whole GPU: the trial it re-runs.
        predicted_from: on a suggestion not launched: the trial whose OOM predicts it.
    """

    report: OomReport | None = None
    gpus: float = 0.0
    co_tenants: int = 0
    infeasible: bool = True
    retries: tuple[BatchRetry, ...] = ()
    alone_retry_of: int | None = None
    predicted_from: int | None = None

    @property
    def predicted(self) -> bool:
        """Whether the trial was never launched (``predicted_oom``)."""
        return self.predicted_from is not None

    @property
    def prune_kind(self) -> str:
        """``oom`` or ``predicted_oom`` (the MLflow tag ``hpsearch.prune_kind``)."""
        return "predicted_oom" if self.predicted else "oom"

    def to_dict(self) -> dict[str, Any]:
        """The stored shape (also the MLflow tags ``hpsearch.oom.<key>``)."""
        if self.predicted_from is not None:
            return {"predicted_from": self.predicted_from, "kind": PREDICTED}
        data: dict[str, Any] = self.report.to_dict() if self.report is not None else {}
        data.update(
            gpus=self.gpus,
            co_tenants=self.co_tenants,
            infeasible=self.infeasible,
            retries=[r.to_dict() for r in self.retries],
        )
        if self.alone_retry_of is not None:
            data["alone_retry_of"] = self.alone_retry_of
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OomRecord:
        """Inverse of :meth:`to_dict`."""
        if data.get("predicted_from") is not None:
            return cls(predicted_from=int(data["predicted_from"]))
        return cls(
            report=OomReport.from_dict(dict(data)) if "kind" in data else None,
            gpus=float(data.get("gpus", 0.0)),
            co_tenants=int(data.get("co_tenants", 0)),
            infeasible=bool(data.get("infeasible", True)),
            retries=tuple(BatchRetry.from_dict(r) for r in data.get("retries", ())),
            alone_retry_of=data.get("alone_retry_of"),
        )


@dataclass(frozen=True)
class OomVerdict:
    """How the driver records one trial that ran out of memory (or would have).

    Attributes:
        reason: the sentence for ``hpsearch.prune_reason``.
        record: what goes on the trial as ``hpsearch.oom``.
        run_alone: enqueue it once more, alone on a whole GPU.
    """

    reason: str
    record: OomRecord = field(default_factory=OomRecord)
    run_alone: bool = False


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)
