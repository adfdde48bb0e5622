"""``hpsearch monitor``: sample GPUs for a while, show them live, write a CSV, report."""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rich.console import Console
from rich.live import Live
from rich.table import Table

from hpsearch.errors import HpsearchError
from hpsearch.monitoring._report import render_report
from hpsearch.placement import TARGET_UTIL_PCT
from hpsearch.telemetry import GpuMonitor, GpuSample, GpuSummary, TelemetryBackend, TraceWriter

_LINE_EVERY_S = 5.0
"""Without a terminal, one line per GPU this often (the CSV has every sample)."""


@dataclass(frozen=True)
class WatchResult:
    """What a monitoring session measured."""

    summaries: list[GpuSummary]
    report: str
    samples: int
    sampler_cpu_s: float
    wall_s: float


class WatchClock(Protocol):
    """The time ``hpsearch monitor`` keeps: its monitor's samples are stamped and paced by it."""

    def __call__(self) -> float:
        """Unix time now."""

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (a virtual clock moves on at once)."""


class WallClock:
    """Real time: what ``hpsearch monitor`` runs on."""

    def __call__(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def watch(
    backend: TelemetryBackend,
    *,
    duration_s: float | None,
    interval_s: float,
    csv_path: Path | None,
    console: Console,
    target_util_pct: float = TARGET_UTIL_PCT,
    clock: WatchClock | None = None,
) -> WatchResult:
    """Sample ``backend`` until ``duration_s`` passes (or Ctrl-C), then summarise everything.

    One clock paces everything: the samples are taken on it, every ``interval_s``,
    by this loop (no thread of their own), so a session runs as well on a virtual
    clock, in no time, as on the wall clock.

    Args:
        clock: the session's clock (default: the wall clock).

    Raises:
        HpsearchError: the CSV file cannot be written.
    """
    clock = clock or WallClock()
    # Keep every sample of the session: the report covers all of it.
    history_s = duration_s or 24 * 3600
    monitor = GpuMonitor(backend, interval_s=interval_s, history_s=history_s, clock=clock)
    started = clock()
    sampler_cpu_s = 0.0
    with ExitStack() as stack:
        writer = None
        if csv_path is not None:
            try:
                stream = stack.enter_context(csv_path.open("w", encoding="utf-8", newline=""))
            except OSError as exc:
                raise HpsearchError(f"--csv: cannot write {csv_path}: {exc.strerror}") from None
            writer = TraceWriter(stream)
        live = (
            stack.enter_context(Live(console=console, auto_refresh=False))
            if console.is_terminal
            else None
        )
        last_line = -float("inf")
        due = started
        try:
            while duration_s is None or due - started < duration_s:
                clock.sleep(max(0.0, due - clock()))
                cpu = time.thread_time()
                new = monitor.sample_now()
                sampler_cpu_s += time.thread_time() - cpu
                # Keep to the grid; after a stall, skip the missed ticks rather than burst.
                due = max(due + interval_s, clock())
                if writer is not None:
                    writer.write(new)
                if live is not None:
                    live.update(_table(new), refresh=True)
                elif new and new[0].time - last_line >= _LINE_EVERY_S:
                    last_line = new[0].time
                    for sample in new:
                        console.print(_line(sample), highlight=False, markup=False, soft_wrap=True)
        except KeyboardInterrupt:
            pass  # the report of what was sampled so far is still wanted
    wall_s = clock() - started
    summaries = monitor.summaries(since=started - 1)
    report = render_report(
        summaries,
        source=backend.describe(),
        interval_s=interval_s,
        sampler_cpu_s=sampler_cpu_s,
        wall_s=wall_s,
        target_util_pct=target_util_pct,
    )
    return WatchResult(summaries, report, monitor.samples_taken, sampler_cpu_s, wall_s)


def _line(sample: GpuSample) -> str:
    if sample.error:
        return f"GPU {sample.index}: error: {sample.error}"
    return (
        f"GPU {sample.index}: {_value(sample.utilization_pct, '%', 0)} util, "
        f"{_value(sample.memory_used_mb, '', 0)} / {_value(sample.memory_total_mb, ' MiB', 0)}, "
        f"{_value(sample.power_w, ' W', 1)}, {_value(sample.temperature_c, ' °C', 0)}"
    )


def _table(samples: list[GpuSample]) -> Table:
    latest = {s.index: s for s in samples}
    table = Table(title="GPUs (Ctrl-C for the report)", title_justify="left")
    for column in ("GPU", "name", "util", "memory", "power", "temp", "processes"):
        table.add_column(column)
    for sample in latest.values():
        processes = "-" if sample.processes is None else str(len(sample.processes))
        table.add_row(
            str(sample.index),
            sample.name,
            _value(sample.utilization_pct, "%", 0),
            f"{_value(sample.memory_used_mb, '', 0)} / {_value(sample.memory_total_mb, ' MiB', 0)}",
            _value(sample.power_w, " W", 1),
            _value(sample.temperature_c, " °C", 0),
            sample.error or processes,
        )
    return table


def _value(value: float | None, unit: str, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{unit}"
