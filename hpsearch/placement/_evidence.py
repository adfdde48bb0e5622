"""What a GPU's samples say about the trials that ran on it: evidence that adds up across trials.

A trial of a few tenths of a second is never measured alone for seconds, but
every sample of its GPU says something: the GPU was ``u``% busy and held ``m``
MiB while ``n`` trial processes ran there, so each asked about ``u / n``% and
``m / n`` MiB (or its own process's memory, where the driver lists it). Cut
along the trials' spans (when each started, reported first and ended), the
samples give each ended trial its profile (:func:`trial_profile`) and the
device its recent per-trial load (:func:`device_reading`), whatever each trial
lasted. Pure: the samples and spans come in, nothing is read here.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from hpsearch.placement._views import DeviceReading, TrialProfile
from hpsearch.telemetry import GpuSample

MIN_SAMPLES = 2
"""Samples a device reading needs before it says anything: one can catch a spike, two
halve it. A third would cost the ramp one more sampling interval before its first
rise, and each level it tries is then judged by the work its trials do, which backs
off from what two samples misread (in the lab, 0.2 s trials reached within 8-13% of
the best fixed count with two, 11-17% with three)."""
ALLOCATED_MB = 64.0
"""A trial process holding less GPU memory than this has not started on the GPU (a CUDA
context alone holds hundreds of MiB): its samples say nothing about what it will ask."""
BUSY_PCT = 95.0
"""A GPU reading this busy with several trials on it hides their demand: it says only that
they ask for more than it has, not what each asks."""
RECENT_SAMPLES = 5
"""The samples a device reading covers at most: the GPU lately, not since the search began."""


@dataclass(frozen=True)
class TrialSpan:
    """One trial process's time on a GPU.

    Attributes:
        number: the trial (the first of a fused group's members).
        started: when it was admitted.
        warm: when it first reported (past its warm-up); ``None``: not yet.
        ended: when it ended; ``None``: still running.
        pid: its worker process, once known.
    """

    number: int
    started: float
    warm: float | None = None
    ended: float | None = None
    pid: int | None = None

    def covers(self, at: float) -> bool:
        """Whether it ran at ``at`` (a sample at its start describes the time before it)."""
        return self.started < at and (self.ended is None or at <= self.ended)


def _per_trial(sample: GpuSample, spans: Sequence[TrialSpan]) -> tuple[float, float, int] | None:
    """The sample's utilisation and memory per trial process running then, and how many ran
    (``None``: none ran, or the reading failed)."""
    if sample.error or sample.utilization_pct is None:
        return None
    running = [s for s in spans if s.covers(sample.time)]
    if not running:
        return None
    n = len(running)
    used = sample.memory_used_mb
    own = [
        m
        for s in running
        if s.pid is not None and (m := sample.process_memory_mb(s.pid)) is not None
    ]
    # A process's own memory where the driver lists it: trials that have not
    # allocated yet would otherwise halve what one that has holds. So with the
    # utilisation: only the processes that hold a context do the work it measures.
    # Divided among trials still starting too, a GPU whose trials each keep it 30%
    # busy read 13% a trial while a ramp's new trials started, and the ramp packed 8.
    memory = max(own) if own else (used / n if used is not None else 0.0)
    if memory < ALLOCATED_MB:
        return None
    if own:
        n = sum(m >= ALLOCATED_MB for m in own)
    return sample.utilization_pct / n, memory, n


def trial_profile(
    span: TrialSpan, samples: Sequence[GpuSample], spans: Sequence[TrialSpan]
) -> TrialProfile | None:
    """What an ended trial asked of its GPU, from the samples taken while it ran past warm-up.

    Args:
        span: the trial (ended, warm).
        samples: its GPU's samples, oldest first.
        spans: every trial process on that GPU around that time (``span`` included).

    Returns:
        ``None`` when no sample fell in its warm run (a trial shorter than the sampling
        interval adds nothing; its neighbours' samples still count for them).
    """
    if span.warm is None or span.ended is None:
        return None
    times = [s.time for s in samples]
    inside = samples[bisect_right(times, span.warm) : bisect_right(times, span.ended)]
    per_trial = [p for s in inside if (p := _per_trial(s, spans)) is not None]
    # A busy GPU shared says the trials wanted more than it had, not how much each did.
    told = [(u, m) for u, m, n in per_trial if n == 1 or u * n < BUSY_PCT]
    if not told:
        return None
    own = [
        m
        for s in inside
        if span.pid is not None and (m := s.process_memory_mb(span.pid)) is not None
    ]
    return TrialProfile(
        span.number,
        sum(u for u, _ in told) / len(told),
        max(own) if own else max(m for _, m in told),
        samples=len(told),
        seconds=span.ended - span.warm,
    )


def device_reading(
    samples: Sequence[GpuSample], spans: Sequence[TrialSpan], now: float, oldest: float
) -> DeviceReading | None:
    """The GPU lately, per trial process: its last few samples taken while trials ran on it.

    Args:
        samples: the GPU's samples, oldest first.
        spans: the trial processes on it around that time.
        now: the current time.
        oldest: samples before this do not count (the evidence would be stale).

    Returns:
        ``None`` until :data:`MIN_SAMPLES` samples with trials running are at hand.
    """
    times = [s.time for s in samples]
    window = samples[bisect_left(times, oldest) : bisect_right(times, now)]
    read = [(s, p) for s in window if (p := _per_trial(s, spans)) is not None]
    read = read[-RECENT_SAMPLES:]
    if len(read) < MIN_SAMPLES:
        return None
    used = [s.memory_used_mb for s, _ in read if s.memory_used_mb is not None]
    counts = {n for _, (_, _, n) in read}
    return DeviceReading(
        utilization_pct=sum(u for _, (u, _, _) in read) / len(read),
        memory_mb=max(m for _, (_, m, _) in read),
        samples=len(read),
        busy_pct=sum(s.utilization_pct or 0.0 for s, _ in read) / len(read),
        used_mb=max(used) if used else None,
        processes=counts.pop() if len(counts) == 1 else None,
        since=read[0][0].time,
        latest=read[-1][0].time,
    )
