"""Packing's judge: each count's throughput from its trials' steps, kept or gone back from."""

from __future__ import annotations

import pytest

from hpsearch.placement import StepRates, Verdict


def _steps(rates: StepRates, warm: int, seconds: float, count: int = 16) -> None:
    for _ in range(count):
        rates.add(warm, seconds)


def test_a_count_that_gains_is_kept_and_said_once() -> None:
    rates = StepRates()
    _steps(rates, 1, 0.060)
    first = rates.judge(limit=8)
    assert first is not None
    assert (first.verdict, first.level, first.below) == (Verdict.KEEP, 1, None)
    assert rates.judge(limit=8) is None  # the same verdict is not said twice
    _steps(rates, 4, 0.062)  # four trials, each nearly as fast as one alone

    judgement = rates.judge(limit=8)

    assert judgement is not None
    assert (judgement.verdict, judgement.level, judgement.below) == (Verdict.KEEP, 4, 1)
    assert judgement.gain == pytest.approx(4 * 0.060 / 0.062)
    assert judgement.paid
    assert "needs 1.16x" in judgement.reason


def test_a_count_measured_no_faster_goes_back_to_the_best_below() -> None:
    # CPU-bound trials on two cores: four take twice as long per step as two.
    rates = StepRates()
    _steps(rates, 2, 0.1)
    _steps(rates, 4, 0.2)

    judgement = rates.judge(limit=4)

    assert judgement is not None
    assert (judgement.verdict, judgement.now, judgement.below) == (Verdict.BACK, 2, 2)
    assert judgement.reason.endswith("back to 2")
    rates.forget(4)
    assert rates.measured() == [2]


def test_steps_that_vary_by_more_than_the_miss_keep_the_count_for_doubt() -> None:
    # Trials of different sizes: the four-trial steps spread widely around a small loss.
    rates = StepRates()
    _steps(rates, 2, 0.1)
    for seconds in (0.05, 0.4) * 8:
        rates.add(4, seconds)

    judgement = rates.judge(limit=4)

    assert judgement is not None
    assert judgement.verdict is Verdict.KEEP
    assert not judgement.paid
    assert "±" in judgement.reason


def test_a_count_needs_steps_enough_to_be_judged() -> None:
    rates = StepRates()
    _steps(rates, 8, 0.06, count=15)  # two steps a trial: 16
    assert rates.judge(limit=8) is None
    rates.add(8, 0.06)
    assert rates.throughput(8) == pytest.approx(8 / 0.06)
    rates.add(0, 0.06)  # a step with no warm trial counted is no evidence
    rates.add(3, 0.0)
    assert rates.measured() == [8]


def test_a_count_is_judged_once_other_trials_than_it_began_with_have_stepped_at_it() -> None:
    # Trials of differing loads: the six a count of six began with are one mix of the
    # search's trials, heavy ones here; its measure waits for a trial to have taken over.
    rates = StepRates()
    for step in range(16):
        rates.add(5, 0.24, trial=step % 5)
        rates.add(5, 0.24, trial=5 + step % 5)  # five trials, then five others
    for step in range(24):
        rates.add(6, 0.4, trial=10 + step % 6)  # the six it began with, slow together
    assert rates.measured() == [5]
    assert rates.judge(limit=6) is not None  # 5's verdict, not 6's
    rates.add(6, 0.25, trial=16)  # a seventh trial at six: a turnover
    judgement = rates.judge(limit=6)
    assert judgement is not None
    assert judgement.level == 6
    for step in range(80):  # trials that report often: the last steps are its six again
        rates.add(6, 0.25, trial=17 + step % 6)
    assert rates.measured() == [5, 6]  # a count that turned over once stays measured
    rates.forget(6)
    for step in range(12):
        rates.add(6, 0.25, trial=16 + step % 6)  # six of them again, after 6 was forgotten
    assert rates.measured() == [5]  # measured afresh: its trials counted afresh too


def test_mps_is_judged_by_its_clients_steps_against_time_sliced_ones_beside_them() -> None:
    rates = StepRates()
    assert rates.mps_verdict() is None
    # Four trials on the GPU: the worker whose CUDA started before the daemon steps in
    # 0.2 s, the three MPS clients in 0.1 s.
    for _ in range(8):
        rates.add(4, 0.2, mps=False)
        rates.add(4, 0.1, mps=True)

    verdict = rates.mps_verdict()

    assert verdict is not None
    assert (verdict.count, verdict.paid) == (4, True)
    assert verdict.mps_steps_per_s == pytest.approx(10.0)
    assert verdict.time_sliced_steps_per_s == pytest.approx(5.0)
    assert verdict.reason.startswith("MPS paid: with 4 trial(s) on the GPU an MPS client")
    assert rates.mps_verdict() is None  # said once
    for _ in range(64):  # the clients slow down to the time-sliced worker's pace
        rates.add(4, 0.2, mps=True)
    later = rates.mps_verdict()
    assert later is not None
    assert not later.paid
    assert later.reason.startswith("MPS did not pay")
