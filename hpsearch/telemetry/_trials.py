"""Which trial ran on which GPU, and the monitor's samples cut into per-trial series and summaries.

The driver tells :class:`TrialGpuMetrics` where each trial was placed (from
the worker's first event) and when it ended; the metrics come from the
monitor's history, so a trial's series starts when the trial started even if
its placement was learned a moment later.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from hpsearch.telemetry._base import (
    GpuDemand,
    GpuLoad,
    GpuReadings,
    GpuSample,
    LoadSink,
    SpeedModel,
    TrialLoad,
)
from hpsearch.telemetry._summary import Reading, implausible_readings, summarize

_KEEP_S = 600.0
SERIES_GAP_S = 1.0
"""The least time between two points of a trial's GPU series: the monitor samples several
times a second (for packing), an MLflow series needs no more than one point a second."""

BUSY_READING_PCT = 95.0
"""A GPU reading this busy may hide demand: the trials on it could want more than 100%."""


@dataclass(frozen=True)
class SeriesPoint:
    """One GPU sample as a trial's metrics (an :class:`hpsearch.tracking.MetricRow`)."""

    metrics: dict[str, float]
    step: int
    time: float


@dataclass(frozen=True)
class TrialGpuReport:
    """A trial's GPU record at its end.

    Attributes:
        metrics: end-of-trial summaries (mean utilisation, peak memory, ...).
        tags: which GPU(s), their name, the co-tenant trials.
        attrs: the same as one JSON-ready dict, for the Optuna trial.
    """

    metrics: dict[str, float]
    tags: dict[str, str]
    attrs: dict[str, Any]


@dataclass
class _Placement:
    gpus: tuple[int, ...]
    pid: int | None
    start: float
    end: float | None = None
    cursor: float = 0.0
    last_point: float = -float("inf")
    steps: int = 0
    load: TrialLoad | None = None
    sharing_max: int = 1
    co_tenants: set[int] = field(default_factory=set)
    alone_util: list[float] = field(default_factory=list)

    def same_process(self, other: _Placement) -> bool:
        """Whether both are trials of one worker process (members of a fused group)."""
        return self.pid is not None and self.pid == other.pid


class TrialGpuMetrics:
    """Per-trial GPU series and summaries, cut from one node's GPU samples.

    Args:
        monitor: the samples of one node's GPUs (this machine's monitor, or another
            node's, streamed here).
        load_sink: where declared loads go when the GPUs are simulated from the
            trials' declarations (a load model); ``None``: they are only recorded.
        sharing: how trials sharing a GPU slow each other, to tell a trial's share
            of its solo speed (:meth:`speed_share`).
    """

    def __init__(
        self,
        monitor: GpuReadings,
        *,
        sharing: SpeedModel,
        load_sink: LoadSink | None = None,
    ) -> None:
        self._monitor = monitor
        self._sharing_model = sharing
        self._learned_until: dict[int, float] = {}
        self._per_trial_util = (0.0, 0)  # sum and count: utilisation per trial, not busy
        self._known = {gpu.index for gpu in monitor.gpus}
        self._names = {gpu.index: gpu.name for gpu in monitor.gpus}
        self._trials: dict[int, _Placement] = {}
        self._load_sink = load_sink

    def placed(
        self,
        number: int,
        *,
        gpu_ids: list[str],
        pid: int | None,
        started_at: float,
    ) -> str:
        """Trial ``number`` runs on these GPUs (of the node read here) since ``started_at``.

        Returns:
            Empty when its GPUs are sampled; else why they are not (for a tag).
        """
        if not gpu_ids:
            return ""
        gpus = tuple(int(i) for i in gpu_ids if i.isdigit())
        missing = [i for i in gpus if i not in self._known]
        if missing or not gpus:
            return f"not sampled: GPU(s) {','.join(gpu_ids)} are not among the monitored GPUs"
        placement = _Placement(gpus=gpus, pid=pid, start=started_at, cursor=started_at)
        self._trials[number] = placement
        for other_number, other in self._trials.items():
            if (
                other_number != number
                and other.end is None
                and set(other.gpus) & set(gpus)
                and not other.same_process(placement)
            ):
                placement.co_tenants.add(other_number)
                other.co_tenants.add(number)
        return ""

    def declared_load(self, number: int, load: GpuLoad) -> None:
        """The trial declared its simulated GPU load: kept in its record, shown by a load model."""
        placement = self._trials.get(number)
        if placement is None:
            return
        placement.load = TrialLoad(load, placement.pid, placement.gpus)
        if self._load_sink is not None:
            self._load_sink.set_load(number, placement.load)

    def speed_share(self, number: int, since: float, until: float) -> float | None:
        """The share of its solo speed trial ``number`` ran at between ``since`` and ``until``.

        The time-weighted mean of the sharing model's speed for the trials on its
        GPU, piece by piece: a piece ends where a trial joins or leaves the GPU or
        a sample is taken. The trials' demand (the sum of their solo
        utilisations) is what they declared when all did (simulated loads); else
        the GPU's latest reading when it was not busy (then it is the sum); else,
        on a busy GPU, the larger of the reading and the trials' solo
        utilisations as measured: each trial's own while it ran alone, or the
        mean per trial of every reading that was not busy.

        Returns:
            ``None`` when the trial's GPUs are not sampled, or no reading says how
            busy they were.
        """
        placement = self._trials.get(number)
        if placement is None:
            return None
        since = max(since, placement.start)
        until = max(until, since)
        weighted, weights = 0.0, 0.0
        for index in placement.gpus:
            self._learn(index)
            history = self._monitor.history(index)
            times = [sample.time for sample in history]
            cuts = {since, until}
            for other in self._trials.values():
                if index in other.gpus:
                    cuts.update(t for t in (other.start, other.end) if t and since < t < until)
            cuts.update(sample.time for sample in history if since < sample.time < until)
            edges = sorted(cuts)
            pieces = list(pairwise(edges)) or [(since, since)]
            for start, end in pieces:
                middle = (start + end) / 2
                share = self._share_at(index, middle, _reading_at(history, times, middle))
                if share is not None:
                    weight = max(end - start, 1e-9)
                    weighted, weights = weighted + share * weight, weights + weight
        return weighted / weights if weights else None

    def tracked(self) -> list[int]:
        """Trials whose GPUs are being sampled."""
        return [n for n, p in self._trials.items() if p.end is None]

    def new_points(self, number: int, until: float | None = None) -> list[SeriesPoint]:
        """The trial's samples since the last call, as metrics (at most up to ``until``)."""
        placement = self._trials.get(number)
        if placement is None or placement.end is not None:
            return []
        points = []
        by_time: dict[float, dict[str, float]] = {}
        for index in placement.gpus:
            # MLflow's own system-metric names, so the run's System metrics tab shows them.
            prefix = f"system/gpu_{index}_"
            for sample in self._monitor.history(index, placement.cursor):
                if until is not None and sample.time > until:
                    break
                row = by_time.setdefault(sample.time, {})
                row.update(self._sample_metrics(sample, placement, prefix))
        for when in sorted(by_time):
            if by_time[when] and when - placement.last_point >= SERIES_GAP_S:
                points.append(SeriesPoint(by_time[when], placement.steps, when))
                placement.steps += 1
                placement.last_point = when
            placement.cursor = when
        return points

    def finish(
        self, number: int, ended_at: float
    ) -> tuple[list[SeriesPoint], TrialGpuReport | None]:
        """The trial ended: its last points and its summary; the load model forgets it."""
        placement = self._trials.get(number)
        if placement is None or placement.end is not None:
            return [], None
        if not any(self._monitor.history(i, placement.start) for i in placement.gpus):
            # Shorter than one sampling interval: one reading, taken now (the trial's
            # load is still declared), still says what its GPU was doing.
            taken = self._monitor.sample_now()
            ended_at = max([ended_at, *(s.time for s in taken)])
        points = self.new_points(number, until=max(ended_at, placement.cursor))
        placement.end = ended_at
        if self._load_sink is not None:
            self._load_sink.clear_load(number)
        self._hand_over_load(number, placement)
        report = self._report(number, placement)
        # Ended trials stay a while: samples of their co-tenants taken before they
        # ended may still be attributed (series are flushed every few seconds).
        for old in [n for n, p in self._trials.items() if p.end and p.end < ended_at - _KEEP_S]:
            del self._trials[old]
        return points, report

    # -- internals -------------------------------------------------------------

    def _hand_over_load(self, number: int, placement: _Placement) -> None:
        """A fused member that declared its group's load ended: a member still training
        in that process holds the load now (the group runs on)."""
        if placement.load is None:
            return
        for other_number, other in self._trials.items():
            if other_number != number and other.end is None and other.same_process(placement):
                other.load = placement.load
                if self._load_sink is not None:
                    self._load_sink.set_load(other_number, other.load)
                return

    def _sharing(self, index: int, at: float) -> int:
        return len(self._members(index, at))

    def _members(self, index: int, at: float) -> list[_Placement]:
        """The trial processes on GPU ``index`` at ``at``: the members of a fused group,
        one process, count once (the one that declared the group's load, if any)."""
        processes: dict[object, _Placement] = {}
        for number, p in self._trials.items():
            if index in p.gpus and p.start < at and (p.end is None or at <= p.end):
                key = p.pid if p.pid is not None else ("trial", number)
                held = processes.get(key)
                if held is None or (held.load is None and p.load is not None):
                    processes[key] = p
        return list(processes.values())

    def _learn(self, index: int) -> None:
        """Take the solo utilisations the GPU's new samples show (alone, or not busy)."""
        since = self._learned_until.get(index)
        for sample in self._monitor.history(index, since):
            self._learned_until[index] = sample.time
            used = sample.utilization_pct
            members = self._members(index, sample.time)
            if used is None or sample.error or not members or used >= BUSY_READING_PCT:
                continue
            if len(members) == 1:
                members[0].alone_util.append(used)
            total, count = self._per_trial_util
            self._per_trial_util = (total + used / len(members), count + 1)

    def _share_at(self, index: int, at: float, sample: GpuSample | None) -> float | None:
        members = self._members(index, at)
        if len(members) <= 1:
            return 1.0
        loads = [p.load for p in members]
        if all(load is not None for load in loads):
            demands = [GpuDemand(p.load.utilization_pct, p.load.sm_share) for p in loads if p]
            return self._sharing_model.gpu_rates(demands)[0]
        used = sample.utilization_pct if sample is not None and not sample.error else None
        if used is None:
            return None
        n = len(members)
        if used >= BUSY_READING_PCT:
            total, count = self._per_trial_util
            typical = total / count if count else used / n
            solo = [
                sum(p.alone_util) / len(p.alone_util) if p.alone_util else typical for p in members
            ]
            used = max(used, sum(solo))
        return self._sharing_model.gpu_rates([GpuDemand(used / n)] * n)[0]

    def _sample_metrics(
        self, sample: GpuSample, placement: _Placement, prefix: str
    ) -> dict[str, float]:
        if sample.error:
            return {}
        bad = {d.reading for d in implausible_readings(sample)}
        metrics: dict[str, float] = {}
        if sample.utilization_pct is not None and Reading.UTILIZATION not in bad:
            metrics[f"{prefix}utilization_percentage"] = sample.utilization_pct
        if sample.memory_used_mb is not None and Reading.MEMORY not in bad:
            metrics[f"{prefix}memory_usage_megabytes"] = sample.memory_used_mb
        if placement.pid is not None:
            own = sample.process_memory_mb(placement.pid)
            if own is not None:
                # The trial's own process: what is the trial's on a shared GPU.
                metrics[f"{prefix}process_memory_megabytes"] = own
        if sample.power_w is not None and Reading.POWER not in bad:
            metrics[f"{prefix}power_usage_watts"] = sample.power_w
        sharing = self._sharing(sample.index, sample.time)
        placement.sharing_max = max(placement.sharing_max, sharing)
        metrics[f"{prefix}trials_sharing"] = float(sharing)
        return metrics

    def _report(self, number: int, placement: _Placement) -> TrialGpuReport:
        metrics: dict[str, float] = {}
        per_gpu: dict[str, Any] = {}
        for index in placement.gpus:
            prefix = "gpu_" if len(placement.gpus) == 1 else f"gpu{index}_"
            samples = [
                s
                for s in self._monitor.history(index, placement.start)
                if placement.end is None or s.time <= placement.end
            ]
            entry: dict[str, Any] = {"name": self._names.get(index, ""), "samples": len(samples)}
            if samples:
                summary = summarize(samples)
                if summary.utilization is not None:
                    metrics[f"{prefix}utilization_mean_pct"] = summary.utilization.mean
                    metrics[f"{prefix}utilization_p95_pct"] = summary.utilization.p95
                if summary.memory_used is not None:
                    metrics[f"{prefix}memory_peak_mb"] = summary.memory_used.max
                if summary.power is not None:
                    metrics[f"{prefix}power_mean_w"] = summary.power.mean
                own = [
                    m
                    for s in samples
                    if placement.pid is not None
                    and (m := s.process_memory_mb(placement.pid)) is not None
                ]
                if own:
                    metrics[f"{prefix}process_memory_peak_mb"] = max(own)
                entry["dropped_readings"] = len(summary.dropped)
            per_gpu[str(index)] = entry
        metrics["gpu_trials_sharing_max"] = float(placement.sharing_max)
        co_tenants = sorted(placement.co_tenants)
        tags = {
            "hpsearch.gpu_index": ",".join(str(i) for i in placement.gpus),
            "hpsearch.gpu_name": ",".join(sorted({self._names.get(i, "") for i in placement.gpus})),
            "hpsearch.gpu_co_tenants": ",".join(str(n) for n in co_tenants) or "none",
            "hpsearch.gpu_trials_sharing_max": str(placement.sharing_max),
        }
        attrs = {
            "gpus": per_gpu,
            "co_tenants": co_tenants,
            "trials_sharing_max": placement.sharing_max,
            "summary": {k: round(v, 3) for k, v in metrics.items()},
        }
        if placement.load is not None:
            attrs["declared_load"] = {
                "utilization_pct": placement.load.load.utilization_pct,
                "memory_mb": placement.load.load.memory_mb,
            }
        return TrialGpuReport(metrics, tags, attrs)


def _reading_at(history: list[GpuSample], times: list[float], at: float) -> GpuSample | None:
    """The sample that describes the moment ``at``: the first taken at or after it (a
    utilisation reading covers the period before it), else the latest one."""
    if not history:
        return None
    return history[min(bisect_left(times, at), len(history) - 1)]
