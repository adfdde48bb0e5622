"""Steady-state throughput of a training loop: samples/s, step time, waiting for data, memory."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

MEMORY_SAMPLE_EVERY = 8
"""Steps between resident-memory readings (a /proc read; cheap, but not free per step)."""


@dataclass
class _Totals:
    steps: int = 0
    samples: int = 0
    wait_s: float = 0.0
    compute_s: float = 0.0


class ThroughputMeter:
    """Times each step of a loop over batches, leaving out the first ``warmup_steps``.

    A step runs from asking the loader for a batch to asking for the next one: the
    wait for the batch (the input pipeline) plus the compute on it. The first
    steps of a trial (lazy initialisation, cuDNN autotuning, ``torch.compile``)
    are left out of the steady-state figures; every step counts in ``train_seconds``.

    On a GPU, kernels run asynchronously: ``sync`` (``torch.cuda.synchronize``) is
    called when a pass over the loader ends, so totals per pass are exact, while the
    split of time between steps inside a pass is the CPU's view.

    Args:
        warmup_steps: steps at the start of the trial left out of steady-state figures.
        clock: seconds, monotonic (tests pass a fake).
        sync: waits for queued device work; ``None`` on CPU.
        memory: returns ``{metric: MiB}`` peaks; default: the process's resident memory.
        gpu_share: the share of a GPU the trial holds (1.0 for a whole one); with it,
            ``gpu_seconds`` (``train_seconds`` times the share) is reported too.
    """

    def __init__(
        self,
        *,
        warmup_steps: int = 3,
        clock: Callable[[], float] = time.perf_counter,
        sync: Callable[[], None] | None = None,
        memory: Callable[[], dict[str, float]] | None = None,
        gpu_share: float | None = None,
    ) -> None:
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        self.warmup_steps = warmup_steps
        self._clock = clock
        self._sync = sync
        self._memory = memory or _ResidentMemory()
        self._gpu_share = gpu_share
        self._all = _Totals()
        self._steady = _Totals()
        self._peaks: dict[str, float] = {}

    def iterate(self, batches: Iterable[T], size: Callable[[T], int] | None = None) -> Iterator[T]:
        """Yield ``batches``, timing each step; ``size`` counts a batch's samples.

        The default size is the length of the batch's first tensor (or of the batch).
        """
        count = size or batch_size_of
        asked = self._clock()
        arrived = wait_s = 0.0
        samples = 0
        in_step = False
        try:
            for batch in batches:
                arrived = self._clock()
                wait_s = arrived - asked
                samples = count(batch)
                in_step = True
                yield batch
                # The step ends when the loop body asks for the next batch.
                asked = self._clock()
                in_step = False
                self._step(samples, wait_s=wait_s, compute_s=asked - arrived)
        finally:
            # Work the GPU still has queued belongs to this pass, not to what follows.
            synced_from = self._clock()
            if self._sync is not None:
                self._sync()
            if in_step:  # the loop left in the middle of a step (break, exception)
                self._step(samples, wait_s=wait_s, compute_s=self._clock() - arrived)
            elif self._sync is not None:
                self._add_compute(self._clock() - synced_from)
            self._sample_memory()

    def metrics(self) -> dict[str, float]:
        """The figures so far, for ``ctx.report``.

        ``samples_per_sec``, ``step_time_ms`` and ``data_wait_share`` (0-1, the
        share of step time spent waiting for the loader) cover steady-state steps
        and are absent until there is one; ``train_seconds`` (all steps), the
        memory peaks and, on a GPU, ``gpu_seconds`` are always there.
        """
        self._sample_memory()
        out: dict[str, float] = {"train_seconds": self._all.wait_s + self._all.compute_s}
        if self._gpu_share is not None:
            out["gpu_seconds"] = out["train_seconds"] * self._gpu_share
        steady = self._steady
        total = steady.wait_s + steady.compute_s
        if steady.steps and total > 0:
            out["samples_per_sec"] = steady.samples / total
            out["step_time_ms"] = 1000 * total / steady.steps
            out["data_wait_share"] = steady.wait_s / total
        out.update(self._peaks)
        return out

    @property
    def steps(self) -> int:
        """Steps timed so far, warm-up included."""
        return self._all.steps

    def _step(self, samples: int, *, wait_s: float, compute_s: float) -> None:
        steady = self._all.steps >= self.warmup_steps
        for totals in (self._all, self._steady) if steady else (self._all,):
            totals.steps += 1
            totals.samples += samples
            totals.wait_s += wait_s
            totals.compute_s += compute_s
        if self._all.steps % MEMORY_SAMPLE_EVERY == 0:
            self._sample_memory()

    def _add_compute(self, seconds: float) -> None:
        self._all.compute_s += seconds
        if self._steady.steps:
            self._steady.compute_s += seconds

    def _sample_memory(self) -> None:
        for name, value in self._memory().items():
            self._peaks[name] = max(value, self._peaks.get(name, 0.0))


def batch_size_of(batch: Any) -> int:
    """Samples in a batch: the length of its first tensor (or first value), or its own length."""
    if isinstance(batch, dict) and batch:
        batch = next(iter(batch.values()))
    if isinstance(batch, list | tuple) and batch:
        batch = batch[0]
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    try:
        return len(batch)
    except TypeError:
        return 1


class _ResidentMemory:
    """The process's resident memory, in MiB, as ``peak_memory_mb`` (Linux: /proc/self/statm)."""

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def __call__(self) -> dict[str, float]:
        try:
            with open("/proc/self/statm", encoding="ascii") as statm:
                resident_pages = int(statm.read().split()[1])
            return {"peak_memory_mb": resident_pages * self._page / 2**20}
        except (OSError, IndexError, ValueError):
            # Elsewhere: the process's lifetime peak (kilobytes on Linux, bytes on macOS).
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return {"peak_memory_mb": peak / (2**20 if os.uname().sysname == "Darwin" else 2**10)}
