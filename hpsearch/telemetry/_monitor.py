"""The GPU monitor: samples a telemetry backend in a background thread of the driver."""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from types import TracebackType

from hpsearch.telemetry._base import GpuInfo, GpuSample, TelemetryBackend
from hpsearch.telemetry._summary import GpuSummary, summarize

logger = logging.getLogger(__name__)

HISTORY_S = 900.0
"""How far back a monitor keeps samples by default (per-trial series are read from there)."""


class GpuMonitor:
    """Samples every GPU of a backend at a fixed interval and keeps recent history.

    Use as a context manager (or :meth:`start`/:meth:`stop`). Readers in other
    threads get copies of the history; the backend is only called under the
    monitor's lock.

    Args:
        backend: what to read.
        interval_s: seconds between samples.
        window_s: the rolling window :meth:`summary` covers by default.
        history_s: how far back samples are kept (per-trial series are read from here).
        clock: wall-clock time source (injectable for tests).
    """

    def __init__(
        self,
        backend: TelemetryBackend,
        *,
        interval_s: float = 0.2,
        window_s: float = 60.0,
        history_s: float = HISTORY_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.backend = backend
        self.interval_s = interval_s
        self.window_s = window_s
        self._clock = clock
        self._gpus = backend.gpus()
        depth = max(2, round(max(history_s, window_s) / interval_s) + 1)
        self._history: dict[int, deque[GpuSample]] = {
            gpu.index: deque(maxlen=depth) for gpu in self._gpus
        }
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sampler_cpu_s = 0.0
        self._started_at: float | None = None
        self._stopped_at: float | None = None
        self._taken = 0
        self._failed = 0

    # -- life cycle --------------------------------------------------------------

    def start(self) -> GpuMonitor:
        """Start sampling in a daemon thread (the first sample is taken at once)."""
        if self._thread is not None:
            raise RuntimeError("the monitor is already running")
        self._stop.clear()
        self._started_at = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="hpsearch-gpu-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and wait for the thread to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self._stopped_at = time.monotonic()

    def __enter__(self) -> GpuMonitor:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- reading -----------------------------------------------------------------

    @property
    def gpus(self) -> list[GpuInfo]:
        """The GPUs being sampled."""
        return list(self._gpus)

    def sample_now(self) -> list[GpuSample]:
        """Take one sample of every GPU now (also called by the thread) and keep it."""
        with self._lock:
            samples = self.backend.sample(self._clock())
            for sample in samples:
                history = self._history.get(sample.index)
                if history is not None:
                    history.append(sample)
            self._taken += 1
        return samples

    def history(self, index: int, since: float | None = None) -> list[GpuSample]:
        """Kept samples of GPU ``index`` taken after ``since`` (all kept ones by default)."""
        with self._lock:
            samples = list(self._history.get(index, ()))
        if since is None or not samples or samples[0].time > since:
            return samples
        # Taken in order: the recent end is found without reading the rest.
        return samples[bisect_right(samples, since, key=lambda s: s.time) :]

    def summary(self, index: int, since: float | None = None) -> GpuSummary | None:
        """Summary of GPU ``index`` over the samples after ``since`` (default: the window)."""
        if since is None:
            since = self._clock() - self.window_s
        samples = self.history(index, since)
        return summarize(samples) if samples else None

    def summaries(self, since: float | None = None) -> list[GpuSummary]:
        """:meth:`summary` of every GPU that has samples."""
        found = (self.summary(gpu.index, since) for gpu in self._gpus)
        return [s for s in found if s is not None]

    @property
    def samples_taken(self) -> int:
        """Sampling rounds so far (one round reads every GPU)."""
        return self._taken

    @property
    def sampler_cpu_s(self) -> float:
        """CPU seconds the sampling thread has used (its own clock, not the process's)."""
        return self._sampler_cpu_s

    @property
    def wall_s(self) -> float:
        """Seconds the monitor has been running."""
        if self._started_at is None:
            return 0.0
        end = self._stopped_at if self._thread is None and self._stopped_at else time.monotonic()
        return end - self._started_at

    # -- the thread --------------------------------------------------------------

    def _loop(self) -> None:
        cpu_start = time.thread_time()
        deadline = time.monotonic()
        while True:
            try:
                self.sample_now()
            except Exception:
                # A backend bug must not end the monitor silently: say so, keep sampling.
                self._failed += 1
                if self._failed in (1, 10, 100):
                    logger.exception("GPU sampling failed (%d times so far)", self._failed)
            self._sampler_cpu_s = time.thread_time() - cpu_start
            deadline += self.interval_s
            # Keep to the grid; after a stall, skip the missed ticks rather than burst.
            now = time.monotonic()
            if deadline < now:
                deadline = now + self.interval_s
            if self._stop.wait(deadline - now):
                break
        self._sampler_cpu_s = time.thread_time() - cpu_start
