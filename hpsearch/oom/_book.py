"""The driver's out-of-memory book: judge an OOM, predict the next, keep the record on the trial.

An :class:`OomBook` decides whether a configuration that ran out is
infeasible or runs again alone on a whole GPU, which suggestions are not worth
launching, and writes its verdicts on the Optuna trial (with a violated
constraint that TPE and NSGA-II steer away from).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.trial import FrozenTrial

from hpsearch import attrs
from hpsearch.oom._base import BatchRetry, OomCase, OomRecord, OomReport, OomVerdict
from hpsearch.oom._predict import OomPredictor
from hpsearch.oom.settings import OomSpec

CONSTRAINT = "oom"
"""The Optuna constraint set on infeasible trials (1.0: violated), which TPE steers away from."""


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
        return memory_cap_mb(gpus, self._gpu_memory_mb)

    def predicted(self, params: Mapping[str, Any], gpus: float) -> OomVerdict | None:
        """The verdict on a suggestion that needs at least the memory of a trial that ran out."""
        known = self._predictor.predict(params, self.cap_mb(gpus))
        if known is None:
            return None
        grows = [n for n in self.spec.grows_memory if n in params]
        larger = ", ".join(f"{n} {params[n]} >= {known.params.get(n)}" for n in grows)
        reason = (
            f"predicted_oom: needs at least the memory of trial {known.number}, which ran "
            f"out of memory (the same other parameters{'; ' + larger if larger else ''}); "
            "not launched"
        )
        return OomVerdict(reason=reason, record=OomRecord(predicted_from=known.number))

    def judge(
        self,
        *,
        number: int,
        params: Mapping[str, Any],
        oom: OomReport,
        gpus: float,
        co_tenants: int,
        alone_retry_of: int | None,
        retries: Sequence[BatchRetry] = (),
    ) -> OomVerdict:
        """Decide what an out-of-memory end means for the search."""
        # Host memory is not divided by GPU sharing: running alone would not help.
        shared = 0 < gpus < 1 and oom.kind != "host"
        run_alone = shared and self.spec.retry_alone and alone_retry_of is None
        record = OomRecord(
            report=oom,
            gpus=gpus,
            co_tenants=co_tenants,
            infeasible=not run_alone,
            retries=tuple(retries),
            alone_retry_of=alone_retry_of,
        )
        where = f"at step {oom.step}" if oom.step is not None else "before its first report"
        peak = f"peak {oom.peak_mb:.0f} MiB" if oom.peak_mb is not None else "peak unknown"
        limit = f"cap {oom.cap_mb:.0f} MiB" if oom.cap_mb is not None else "whole GPU"
        reason = (
            f"oom: {oom.message or 'out of memory'} {where} ({peak}, {limit}, "
            f"{co_tenants} co-tenant trial(s))"
        )
        if retries:
            reason += (
                f"; after {len(retries)} smaller-batch retr{'y' if len(retries) == 1 else 'ies'}"
            )
        if run_alone:
            reason += "; it runs again alone on a whole GPU before being judged infeasible"
        else:
            self._predictor.add(OomCase(number, dict(params), oom.cap_mb))
        return OomVerdict(reason=reason, record=record, run_alone=run_alone)

    def record(self, trial: optuna.Trial, record: OomRecord) -> None:
        """Put the record on the live Optuna trial (before it is told)."""
        trial.set_user_attr(attrs.OOM, record.to_dict())
        if record.infeasible:
            mark_infeasible(trial)


def memory_cap_mb(gpus: float, gpu_memory_mb: float | None) -> float | None:
    """The memory cap of a trial holding ``gpus`` of one GPU (``None``: a whole GPU, or unknown)."""
    if 0 < gpus < 1 and gpu_memory_mb:
        return gpus * gpu_memory_mb
    return None


def mark_infeasible(trial: optuna.Trial) -> None:
    """Flag the trial infeasible for hpsearch and for Optuna's samplers (a violated constraint)."""
    trial.set_user_attr(attrs.INFEASIBLE, True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        trial.set_constraint(CONSTRAINT, 1.0)


def oom_record(trial: FrozenTrial) -> OomRecord | None:
    """The trial's out-of-memory record, when it was pruned for memory (or predicted to be)."""
    stored = trial.user_attrs.get(attrs.OOM)
    return OomRecord.from_dict(stored) if stored else None


def is_oom(trial: FrozenTrial) -> bool:
    """Whether the trial was pruned for running out of memory (predicted ones included)."""
    return attrs.OOM in trial.user_attrs


class OomTally:
    """Counts of OOM trials and the share of GPU-seconds they used, kept as trials finish.

    GPU-seconds are each finished trial's duration times the GPU share it held
    (none in a search without GPUs).
    """

    def __init__(self) -> None:
        self.ran_out = 0
        self.predicted = 0
        self._gpu_seconds = 0.0
        self._wasted = 0.0

    def add(self, record: OomRecord | None, gpus: float, duration_s: float) -> None:
        """A trial finished (``record``: its out-of-memory record, when it has one)."""
        used = gpus * duration_s
        self._gpu_seconds += used
        if record is not None and record.predicted:
            self.predicted += 1
        elif record is not None:
            self.ran_out += 1
            self._wasted += used

    def add_stored(self, trial: FrozenTrial) -> None:
        """A finished trial, as the study stores it (its OOM record, GPU share, duration)."""
        gpus = float(trial.user_attrs.get(attrs.RESOURCES, {}).get("gpus", 0.0))
        duration = float(trial.user_attrs.get(attrs.DURATION, 0.0))
        self.add(oom_record(trial), gpus, duration)

    def summary(self) -> dict[str, float]:
        """The parent run's metrics."""
        summary = {"trials_oom": float(self.ran_out), "trials_predicted_oom": float(self.predicted)}
        if self._gpu_seconds > 0:
            summary["oom_wasted_gpu_seconds_share"] = self._wasted / self._gpu_seconds
        return summary


def oom_summary(trials: Sequence[FrozenTrial]) -> dict[str, float]:
    """:class:`OomTally`'s summary of the study's finished trials."""
    tally = OomTally()
    for trial in trials:
        if trial.state.is_finished():
            tally.add_stored(trial)
    return tally.summary()
