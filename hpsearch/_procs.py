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
        fields = _stat_fields(entry / "stat")  # none: it ended while being read
        if len(fields) > 2:  # state ppid pgrp ...
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
    fields = _stat_fields(PROC / str(pid) / "stat")
    # After the command: state is field 3 of stat, starttime field 22.
    return int(fields[19]) if len(fields) > 19 else None


def waited_ticks(pid: str | int) -> int | None:
    """The CPU time (clock ticks) of the children process ``pid`` (``self`` too) waited for."""
    fields = _stat_fields(PROC / str(pid) / "stat")
    # After the command: cutime and cstime are fields 16 and 17 of stat.
    return int(fields[13]) + int(fields[14]) if len(fields) > 14 else None


def thread_activity(task: Path) -> tuple[int, int] | None:
    """How much a thread has run (``/proc/<pid>/task/<tid>``): its CPU time in clock ticks,
    and how often it was switched to the CPU and off it. ``None``: gone.

    The count moves each time the thread wakes, from a 50 ms sleep or a lock's poll,
    where a 10 ms tick of CPU time may take minutes to; a thread blocked on a lock,
    a pipe or a socket leaves both where they were.
    """
    fields = _stat_fields(task / "stat")
    try:
        status = (task / "status").read_text()
    except OSError:
        return None
    if len(fields) < 13:
        return None
    switches = sum(
        int(line.split(":", 1)[1])
        for line in status.splitlines()
        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"))
    )
    # After the command: utime and stime are fields 14 and 15 of stat.
    return int(fields[11]) + int(fields[12]), switches


def thread_name(task: Path) -> str | None:
    """A thread's name as ``/proc/<pid>/task/<tid>/comm`` gives it (15 characters at
    most: ``grpc_global_tim`` for ``grpc_global_timer``). ``None``: gone."""
    try:
        return (task / "comm").read_text().rstrip("\n")
    except OSError:
        return None


def _stat_fields(stat: Path) -> list[str]:
    """The fields of a ``stat`` file after ``pid (comm)``, split after the last ``)``: a
    command may hold spaces and parentheses. None: the process or thread is gone."""
    try:
        return stat.read_text().rpartition(")")[2].split()
    except OSError:
        return []
