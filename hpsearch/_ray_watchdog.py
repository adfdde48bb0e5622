"""Kills what is left of a local Ray, and removes the search's scratch folder, once the
driver that started them is gone.

A driver killed with SIGKILL ends nothing: its Ray's control store and raylet stop
soon after, but Ray's agents and a trial's worker linger about a minute, and the
search's scratch folder under the temp dir (the trials' output, the workers' exits)
stays for good. The driver starts this watchdog beside the Ray it started or joined
(``python -m hpsearch._ray_watchdog FD SCRATCH PID...``), in a session of its own,
with the read end of a pipe only the driver holds open, its scratch folder (``-``:
none) and the ids of Ray's processes it started (none for a cluster it joined).
While the driver lives, it keeps the list of those processes and their descendants;
once the pipe reads end-of-file (the driver exited, however), it kills every one of
them still running. Each is known by its id and start time, so a reused id is spared.
A driver that ends its search writes :data:`CLEAN_END` first, and removes its scratch
folder itself; without it (the driver was killed), the watchdog removes the folder.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import sys
from pathlib import Path

from hpsearch._procs import descendants, start_time

REFRESH_S = 2.0
"""How often the list of Ray's processes is brought up to date while the driver lives."""
CLEAN_END = b"."
"""What a driver writes on the pipe as it ends its search: its scratch folder is its own
to remove (the watchdog removes it where the pipe closes without it)."""
NO_SCRATCH = "-"
"""The scratch argument of a driver that has none."""


def _known(roots: list[int]) -> dict[int, int]:
    """Ray's processes now (``roots`` and their descendants): id to start time."""
    found: dict[int, int] = {}
    for pid in [*roots, *(child for root in roots for child in descendants(root))]:
        started = start_time(pid)
        if started is not None:
            found[pid] = started
    return found


def watch(fd: int, roots: list[int], scratch: Path | None = None) -> None:
    """Follow ``roots`` until ``fd`` reads end-of-file, then kill what is left of them,
    and remove ``scratch`` unless the driver said :data:`CLEAN_END` first."""
    known = _known(roots)
    clean = False
    while True:
        ready, _, _ = select.select([fd], [], [], REFRESH_S)
        if ready:
            said = os.read(fd, 1)
            if not said:
                break  # every writer is gone: the driver has exited
            clean = clean or said == CLEAN_END
        known.update(_known(roots))
    known.update(_known(roots))  # what the raylet started in its last moments
    for pid, started in known.items():
        if start_time(pid) == started:  # the same process, not a reused id
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    if scratch is not None and not clean:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    where = None if sys.argv[2] == NO_SCRATCH else Path(sys.argv[2])
    watch(int(sys.argv[1]), [int(pid) for pid in sys.argv[3:]], where)
