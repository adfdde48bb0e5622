"""The process table as Linux's ``/proc`` shows it: who is whose child, which group is live.

Empty answers where there is no ``/proc`` (the callers then fall back on signals).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessEntry:
    """One process: its id, state letter (``Z``: a zombie), parent and process group."""

    pid: int
    state: str
    ppid: int
    pgrp: int


def processes() -> Iterator[ProcessEntry]:
    """Every process ``/proc`` lists now (none without ``/proc``)."""
    if not PROC.is_dir():
        return
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after ")".
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # it ended while being read
        if len(fields) > 2:
            yield ProcessEntry(int(entry.name), fields[0], int(fields[1]), int(fields[2]))


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, theirs, ...), as the table links them now."""
    children: dict[int, list[int]] = {}
    for process in processes():
        children.setdefault(process.ppid, []).append(process.pid)
    found: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return found


def group_running(group: int) -> bool | None:
    """Whether a live (not zombie) process of ``group`` runs; ``None``: no ``/proc`` to tell."""
    if not PROC.is_dir():
        return None
    return any(p.pgrp == group and p.state != "Z" for p in processes())


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot): with its id, it names one
    process, as ids are reused. ``None``: no such process (or no ``/proc``)."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    # After the command: state is field 3 of stat, starttime field 22.
    return int(fields[19]) if len(fields) > 19 else None
