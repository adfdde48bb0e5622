"""The throughput meter against a clock the test moves by hand."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from hpsearch.torch import ThroughputMeter, batch_size_of


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _loader(clock: Clock, waits: list[float], size: int = 32) -> Iterator[torch.Tensor]:
    for wait in waits:
        clock.advance(wait)  # the input pipeline
        yield torch.zeros(size, 4)


def _meter(
    clock: Clock, warmup: int = 2, sync: Callable[[], None] | None = None
) -> ThroughputMeter:
    return ThroughputMeter(
        warmup_steps=warmup, clock=clock, sync=sync, memory=lambda: {"peak_memory_mb": 100.0}
    )


def test_steady_state_leaves_out_warmup() -> None:
    clock = Clock()
    meter = _meter(clock)
    computes = iter([1.0, 0.5, 0.03, 0.03, 0.03, 0.03])  # slow first steps: compile, autotune
    for _ in meter.iterate(_loader(clock, [0.01] * 6)):
        clock.advance(next(computes))
    metrics = meter.metrics()
    assert meter.steps == 6
    assert metrics["samples_per_sec"] == pytest.approx(4 * 32 / (4 * 0.04))
    assert metrics["step_time_ms"] == pytest.approx(40.0)
    assert metrics["data_wait_share"] == pytest.approx(0.25)
    assert metrics["train_seconds"] == pytest.approx(1.5 + 4 * 0.03 + 6 * 0.01)
    assert metrics["peak_memory_mb"] == 100.0


def test_input_bound_loop_shows_in_the_wait_share() -> None:
    clock = Clock()
    meter = _meter(clock, warmup=0)
    for _ in meter.iterate(_loader(clock, [0.09] * 10)):
        clock.advance(0.01)
    assert meter.metrics()["data_wait_share"] == pytest.approx(0.9)


def test_no_throughput_figures_before_a_steady_step() -> None:
    clock = Clock()
    meter = _meter(clock, warmup=5)
    for _ in meter.iterate(_loader(clock, [0.01] * 3)):
        clock.advance(0.01)
    metrics = meter.metrics()
    assert "samples_per_sec" not in metrics
    assert metrics["train_seconds"] == pytest.approx(0.06)


def test_passes_add_up_and_a_break_still_counts_its_step() -> None:
    clock = Clock()
    meter = _meter(clock, warmup=0)
    for _ in range(2):  # two epochs
        for _ in meter.iterate(_loader(clock, [0.01] * 3)):
            clock.advance(0.01)
    for index, _ in enumerate(meter.iterate(_loader(clock, [0.01] * 3))):
        clock.advance(0.01)
        if index == 1:
            break
    assert meter.steps == 8
    assert meter.metrics()["samples_per_sec"] == pytest.approx(8 * 32 / (8 * 0.02))


def test_queued_device_work_is_charged_to_the_pass() -> None:
    clock = Clock()
    synced: list[float] = []

    def sync() -> None:  # the GPU finishing what the CPU queued
        synced.append(clock.now)
        clock.advance(0.2)

    meter = _meter(clock, warmup=0, sync=sync)
    for _ in meter.iterate(_loader(clock, [0.0] * 4)):
        clock.advance(0.05)
    assert len(synced) == 1
    assert meter.metrics()["samples_per_sec"] == pytest.approx(4 * 32 / 0.4)


def test_memory_keeps_the_peak() -> None:
    clock = Clock()
    readings = iter([50.0, 300.0, 120.0, 80.0])
    meter = ThroughputMeter(clock=clock, memory=lambda: {"peak_memory_mb": next(readings, 10.0)})
    meter.metrics()
    meter.metrics()
    assert meter.metrics()["peak_memory_mb"] == 300.0


def test_batch_sizes() -> None:
    assert batch_size_of((torch.zeros(5, 2), torch.zeros(5))) == 5
    assert batch_size_of({"x": torch.zeros(7, 1)}) == 7
    assert batch_size_of([1, 2, 3]) == 1  # a list of scalars: its first element has no length
    assert batch_size_of(torch.zeros(3)) == 3
