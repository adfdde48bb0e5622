"""Kills what is left of a local Ray once the driver that started it is gone.

A driver killed with SIGKILL ends nothing: its Ray's control store and raylet stop
soon after, but Ray's agents and a trial's worker linger about a minute. The
driver starts this watchdog beside its local Ray (``python -m
hpsearch._ray_watchdog FD PID...``), in a session of its own, with the read end
of a pipe only the driver holds open and the ids of Ray's processes. While the
driver lives, it keeps the list of those processes and their descendants; once
the pipe reads end-of-file (the driver exited, however), it kills every one of
them still running. Each is known by its id and start time, so a reused id is spared.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys

from hpsearch._procs import descendants, start_time

REFRESH_S = 2.0
"""How often the list of Ray's processes is brought up to date while the driver lives."""


def _known(roots: list[int]) -> dict[int, int]:
    """Ray's processes now (``roots`` and their descendants): id to start time."""
    found: dict[int, int] = {}
    for pid in [*roots, *(child for root in roots for child in descendants(root))]:
        started = start_time(pid)
        if started is not None:
            found[pid] = started
    return found


def watch(fd: int, roots: list[int]) -> None:
    """Follow ``roots`` until ``fd`` reads end-of-file, then kill what is left of them."""
    known = _known(roots)
    while True:
        ready, _, _ = select.select([fd], [], [], REFRESH_S)
        if ready and not os.read(fd, 1):
            break  # every writer is gone: the driver has exited
        known.update(_known(roots))
    known.update(_known(roots))  # what the raylet started in its last moments
    for pid, started in known.items():
        if start_time(pid) == started:  # the same process, not a reused id
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    watch(int(sys.argv[1]), [int(pid) for pid in sys.argv[2:]])
