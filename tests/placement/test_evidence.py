"""What a GPU's samples say per trial, cut along the trials' spans: pure, hand-written samples."""

from __future__ import annotations

import pytest

from hpsearch.placement import TrialSpan, device_reading, trial_profile
from hpsearch.telemetry import GpuProcess, GpuSample


def _sample(
    at: float, util: float, used: float, processes: tuple[GpuProcess, ...] | None = None
) -> GpuSample:
    return GpuSample(
        time=at,
        index=0,
        name="GPU",
        utilization_pct=util,
        memory_used_mb=used,
        memory_total_mb=143771.0,
        processes=processes,
    )


def test_a_short_trial_is_profiled_from_the_samples_of_its_warm_run_shared_or_not() -> None:
    # Trial 1 ran 0.2-0.8 s (warm at 0.3) beside trial 2 (0.5-2.0): alone at first, then
    # two trials on the GPU. Each sample's utilisation and memory split over the trials then.
    spans = [TrialSpan(1, 0.2, 0.3, 0.8), TrialSpan(2, 0.5, 0.6, 2.0)]
    samples = [_sample(0.4, 2.0, 830.0), _sample(0.6, 4.0, 1660.0), _sample(0.8, 4.0, 1660.0)]

    profile = trial_profile(spans[0], samples, spans)

    assert profile is not None
    assert profile.number == 1
    assert profile.utilization_pct == pytest.approx(2.0)
    assert profile.memory_mb == pytest.approx(830.0)
    assert profile.samples == 3
    assert profile.seconds == pytest.approx(0.5)


def test_a_trial_shorter_than_the_sampling_interval_says_nothing() -> None:
    span = TrialSpan(1, 0.0, 0.05, 0.15)
    assert trial_profile(span, [_sample(0.2, 5.0, 800.0)], [span]) is None
    assert trial_profile(TrialSpan(2, 0.0, None, 1.0), [_sample(0.5, 5.0, 800.0)], []) is None


def test_a_busy_shared_gpu_hides_what_each_trial_asked() -> None:
    # Three trials on a GPU reading 100%: each asked more than a third; not learned.
    spans = [TrialSpan(n, 0.0, 0.1, 1.0) for n in range(3)]
    assert trial_profile(spans[0], [_sample(0.5, 100.0, 3000.0)], spans) is None


def test_a_process_own_memory_and_work_count_where_the_driver_lists_it() -> None:
    # Trial 2 has started but not allocated: the GPU's memory and its work are trial 1's
    # alone. Split over both, a ramp's trials still starting would make each one that
    # works look a fraction of what it asks.
    spans = [TrialSpan(1, 0.0, 0.1, None, pid=11), TrialSpan(2, 0.3, None, None, pid=12)]
    own = (GpuProcess(11, 830.0),)
    samples = [_sample(t, 30.0, 830.0, own) for t in (0.4, 0.6, 0.8)]

    reading = device_reading(samples, spans, now=0.9, oldest=0.0)

    assert reading is not None
    assert reading.memory_mb == 830.0  # not 415: half of what one trial holds
    assert reading.utilization_pct == pytest.approx(30.0)  # not 15
    assert (reading.processes, reading.busy_pct, reading.used_mb) == (1, 30.0, 830.0)
    assert (reading.since, reading.latest) == (0.4, 0.8)
    # Once trial 2 holds its context, the work is split over both.
    both = (GpuProcess(11, 830.0), GpuProcess(12, 830.0))
    samples += [_sample(t, 60.0, 1660.0, both) for t in (1.0, 1.2)]
    later = device_reading(samples, spans, now=1.3, oldest=0.9)
    assert later is not None
    assert later.utilization_pct == pytest.approx(30.0)
    assert later.processes == 2


def test_a_device_reading_needs_a_few_recent_samples_with_trials_running() -> None:
    spans = [TrialSpan(1, 1.0, None, None)]
    samples = [_sample(t, 2.0, 800.0) for t in (0.2, 0.6, 1.2)]
    # One sample while the trial ran (it may be a spike): not yet; a second makes it, a
    # stale one does not.
    assert device_reading(samples, spans, now=1.3, oldest=0.0) is None
    samples.append(_sample(1.4, 2.0, 800.0))
    assert device_reading(samples, spans, now=1.5, oldest=0.0) is not None
    assert device_reading(samples, spans, now=1.5, oldest=1.3) is None
