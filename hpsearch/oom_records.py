"""What the driver does about trials that ran out of memory: judge, record, predict, retry alone.

The recorder hands each out-of-memory end (and each new suggestion) to an
:class:`OomBook`; it decides whether the configuration is infeasible, whether
it runs again alone on a whole GPU, and which suggestions are not worth launching.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.trial import FrozenTrial

from hpsearch import attrs
from hpsearch.config import OomSpec
from hpsearch.oom import OomCase, OomPredictor

CONSTRAINT = "oom"
"""The Optuna constraint set on infeasible trials (1.0: violated), which TPE steers away from."""


@dataclass(frozen=True)
class OomVerdict:
    """How the driver records one trial that ran out of memory.

    Attributes:
        reason: the sentence for ``hpsearch.prune_reason``.
        record: the ``hpsearch.oom`` user attr (and MLflow tags).
        infeasible: the configuration is judged infeasible (constraint set, predictor fed).
        run_alone: enqueue it once more, alone on a whole GPU.
    """

    reason: str
    record: dict[str, Any] = field(default_factory=dict)
    infeasible: bool = True
    run_alone: bool = False


class OomBook:
    """The driver's out-of-memory bookkeeping for one search.

    Args:
        spec: the config's ``oom`` section.
        trials: the study's trials so far (its earlier infeasible ones seed the predictor).
        gpu_memory_mb: each GPU's memory, when known (to turn a GPU share into a cap).
    """

    def __init__(
        self, spec: OomSpec, trials: Sequence[FrozenTrial], gpu_memory_mb: float | None
    ) -> None:
        self.spec = spec
        self._gpu_memory_mb = gpu_memory_mb
        self._predictor = OomPredictor(spec.grows_memory, spec.memory_neutral)
        for trial in trials:
            if trial.user_attrs.get(attrs.INFEASIBLE):
                oom = trial.user_attrs.get(attrs.OOM, {})
                self._predictor.add(OomCase(trial.number, dict(trial.params), oom.get("cap_mb")))

    def cap_mb(self, gpus: float) -> float | None:
        """The memory cap of a trial holding ``gpus`` of one GPU (``None``: a whole GPU)."""
        if 0 < gpus < 1 and self._gpu_memory_mb:
            return gpus * self._gpu_memory_mb
        return None

    def predicted(self, params: Mapping[str, Any], gpus: float) -> OomCase | None:
        """The trial that ran out which ``params`` needs at least as much memory as."""
        return self._predictor.predict(params, self.cap_mb(gpus))

    def judge(
        self,
        *,
        number: int,
        params: Mapping[str, Any],
        oom: Mapping[str, Any],
        gpus: float,
        co_tenants: int,
        alone_retry_of: int | None,
        retries: Sequence[Mapping[str, Any]] = (),
    ) -> OomVerdict:
        """Decide what an out-of-memory end means for the search."""
        cap = oom.get("cap_mb")
        # Host memory is not divided by GPU sharing: running alone would not help.
        shared = 0 < gpus < 1 and oom.get("kind") != "host"
        run_alone = shared and self.spec.retry_alone and alone_retry_of is None
        record = {
            **dict(oom),
            "gpus": gpus,
            "co_tenants": co_tenants,
            "infeasible": not run_alone,
            "retries": list(retries),
        }
        if alone_retry_of is not None:
            record["alone_retry_of"] = alone_retry_of
        where = (
            f"at step {oom['step']}" if oom.get("step") is not None else "before its first report"
        )
        peak = (
            f"peak {oom['peak_mb']:.0f} MiB" if oom.get("peak_mb") is not None else "peak unknown"
        )
        limit = f"cap {cap:.0f} MiB" if cap is not None else "whole GPU"
        reason = (
            f"oom: {oom.get('message', 'out of memory')} {where} ({peak}, {limit}, "
            f"{co_tenants} co-tenant trial(s))"
        )
        if retries:
            reason += (
                f"; after {len(retries)} smaller-batch retr{'y' if len(retries) == 1 else 'ies'}"
            )
        if run_alone:
            reason += "; it runs again alone on a whole GPU before being judged infeasible"
        else:
            self._predictor.add(OomCase(number, dict(params), cap))
        return OomVerdict(
            reason=reason, record=record, infeasible=not run_alone, run_alone=run_alone
        )

    def record(self, trial: optuna.Trial, verdict: OomVerdict) -> None:
        """Put the verdict on the Optuna trial (before it is told)."""
        trial.set_user_attr(attrs.OOM, verdict.record)
        if verdict.infeasible:
            mark_infeasible(trial)


def mark_infeasible(trial: optuna.Trial) -> None:
    """Flag the trial infeasible for hpsearch and for Optuna's samplers (a violated constraint)."""
    trial.set_user_attr(attrs.INFEASIBLE, True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        trial.set_constraint(CONSTRAINT, 1.0)


def is_oom(trial: FrozenTrial) -> bool:
    """Whether the trial was pruned for running out of memory (predicted ones included)."""
    return attrs.OOM in trial.user_attrs
