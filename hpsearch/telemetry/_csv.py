"""GPU samples as CSV: what ``hpsearch monitor --csv`` writes and a simulated GPU replays.

One row per GPU per sample. Lines starting with ``#`` are comments (a trace's
provenance). ``processes`` is empty when the list was not available, ``none``
when no process held the GPU, else ``pid:MiB`` entries joined by ``;`` (``?``
for memory the driver withholds).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from hpsearch.telemetry._base import GpuProcess, GpuSample

COLUMNS = (
    "time",
    "gpu",
    "name",
    "utilization_pct",
    "memory_used_mb",
    "memory_total_mb",
    "power_w",
    "power_limit_w",
    "temperature_c",
    "processes",
    "error",
)


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file, the line and the problem."""


def format_row(sample: GpuSample) -> list[str]:
    """A sample as CSV cells, in :data:`COLUMNS` order."""
    return [
        f"{sample.time:.3f}",
        str(sample.index),
        sample.name,
        _number(sample.utilization_pct),
        _number(sample.memory_used_mb),
        _number(sample.memory_total_mb),
        _number(sample.power_w),
        _number(sample.power_limit_w),
        _number(sample.temperature_c),
        _format_processes(sample.processes),
        sample.error,
    ]


class TraceWriter:
    """Appends samples to a CSV file as they come (a crash keeps what was written)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._writer = csv.writer(stream)
        self._writer.writerow(COLUMNS)

    def write(self, samples: Iterable[GpuSample]) -> None:
        """Write one row per sample and flush."""
        self._writer.writerows(format_row(s) for s in samples)
        self._stream.flush()


def read_trace(path: Path) -> list[GpuSample]:
    """Every sample of a trace file, in file order.

    Raises:
        TraceError: a missing file, a missing column or a cell that is not a number.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace ({exc.strerror})") from None
    lines = [
        (n, line)
        for n, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.startswith("#")
    ]
    reader = csv.DictReader(line for _, line in lines)
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise TraceError(
            f"{path}: missing column(s) {', '.join(missing)}; a trace has the columns "
            f"{','.join(COLUMNS)} (what hpsearch monitor --csv writes)"
        )
    samples = []
    numbers = iter(n for n, _ in lines[1:])
    for row in reader:
        line = next(numbers)
        try:
            samples.append(_parse_row(row))
        except ValueError as exc:
            raise TraceError(f"{path}:{line}: {exc}") from None
    if not samples:
        raise TraceError(f"{path}: the trace has no rows")
    return samples


def _parse_row(row: dict[str, str]) -> GpuSample:
    return GpuSample(
        time=_required(row, "time"),
        index=int(_required(row, "gpu")),
        name=row["name"],
        utilization_pct=_optional(row, "utilization_pct"),
        memory_used_mb=_optional(row, "memory_used_mb"),
        memory_total_mb=_optional(row, "memory_total_mb"),
        power_w=_optional(row, "power_w"),
        power_limit_w=_optional(row, "power_limit_w"),
        temperature_c=_optional(row, "temperature_c"),
        processes=_parse_processes(row["processes"]),
        error=row["error"] or "",
    )


def _required(row: dict[str, str], column: str) -> float:
    value = _optional(row, column)
    if value is None:
        raise ValueError(f"{column} is empty")
    return value


def _optional(row: dict[str, str], column: str) -> float | None:
    cell = (row.get(column) or "").strip()
    if not cell:
        return None
    try:
        return float(cell)
    except ValueError:
        raise ValueError(f"{column} {cell!r} is not a number") from None


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _format_processes(processes: tuple[GpuProcess, ...] | None) -> str:
    if processes is None:
        return ""
    if not processes:
        return "none"
    return ";".join(f"{p.pid}:{_number(p.memory_mb) or '?'}" for p in processes)


def _parse_processes(cell: str) -> tuple[GpuProcess, ...] | None:
    cell = cell.strip()
    if not cell:
        return None
    if cell == "none":
        return ()
    processes = []
    for entry in cell.split(";"):
        pid, _, memory = entry.partition(":")
        try:
            processes.append(GpuProcess(int(pid), None if memory in ("", "?") else float(memory)))
        except ValueError:
            raise ValueError(f"processes entry {entry!r} is not pid:MiB") from None
    return tuple(processes)
