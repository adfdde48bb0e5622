"""A trial that hangs: its code did not run at all (no CPU time, not one wake-up) and
reported nothing for ``execution.hang_timeout``.

A deadlock (a lock, a queue whose producer died), a read from a socket with no
timeout, a wait for a peer that never comes: such a trial held its slot, and the
search its end, for ever unless ``execution.trial_timeout`` was set. A trial that
works uses CPU time, on a GPU too (its thread launches the kernels and waits on
them), and one that waits on a download or on a lock another trial holds polls, so
it wakes; a trial whose own threads and processes neither used a clock tick nor woke
once, and that reported nothing, for the whole limit is hung. Its worker then ends itself (exit
:data:`~hpsearch.trial.protocol.EXIT_HUNG`), taking what the trial started along, and
the driver records the trial FAIL with reason ``hung``; the search goes on.

A trial's own running is that of the thread that runs it, of the threads it
started, and of the processes below its worker (a script and its children, DataLoader
workers); not Ray's threads or hpsearch's, which tick while the trial hangs: those
there when the trial starts, and those gRPC's core (in Ray's worker) starts and ends as
it needs them afterwards (:data:`FOREIGN_THREADS`). Where there is no ``/proc``
(macOS) nothing is watched.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hpsearch._procs import PROC, descendants, thread_activity, thread_name, waited_ticks
from hpsearch.trial.protocol import EXIT_HUNG, HUNG_SAID
from hpsearch.worker._limits import end_worker

Activity = dict[str, tuple[int, int]]
"""How much a trial has run so far (:func:`~hpsearch._procs.thread_activity`), by thread
(``t<id>``, ``p<pid>.<id>``) and by the children a process waited for (``p<pid>``)."""

FOREIGN_THREADS = ("grpc_", "event_engine", "default-executo", "resolver-execut")
"""How the threads that gRPC's core starts in a Ray worker after its trial has started
are named (as ``/proc`` shows names: 15 characters at most): its timer
(``grpc_global_timer``), its event engine's and executors' pools. They are Ray's, not
the trial's, and not still: under load the timer woke about once a second for the 6-11
s after a trial's first report (2026-11-30), and held a trial hung on a lock back from
its 2 s limit that long."""


class Stillness:
    """How long a trial has been still (it did not run, and did not report), and whether
    that is past its limit. A pure policy: the caller gives the samples and the clock.
    """

    def __init__(self, limit_s: float, now: float) -> None:
        self.limit_s = limit_s
        self._since = now
        self._last: Activity | None = None

    def heard(self, now: float) -> None:
        """The trial reported: it is not still."""
        self._since = now

    def hung(self, sample: Activity, now: float) -> bool:
        """Whether, with its running as ``sample`` now, the trial has been still for its limit.

        Any change counts as work: a tick, a thread or process started or ended.
        """
        if sample != self._last:
            self._last = sample
            self._since = max(self._since, now)
            return False
        return now - self._since >= self.limit_s


def watch_every(limit_s: float) -> float:
    """How often a trial's running is read: often enough to end it near its limit (a
    twentieth of it), and no more than every 30 s for long limits: a read lists all of
    ``/proc``, 5 ms with 116 processes here, and tens of milliseconds on a machine of
    16 packed trials and their DataLoader workers, for each of them."""
    return min(30.0, max(0.05, limit_s / 20))


def own_activity(before: frozenset[int], caller: int | None) -> Activity:
    """How much the trial has run: this process's threads not in ``before`` (and thread
    ``caller``), every thread of the processes below it, and those it waited for."""
    sample: Activity = {}
    for tid, activity in _threads(PROC / "self", skip=before - {caller or -1}, foreign=True):
        sample[f"t{tid}"] = activity
    for pid in descendants(os.getpid()):
        for tid, activity in _threads(PROC / str(pid)):
            sample[f"p{pid}.{tid}"] = activity
        sample[f"p{pid}"] = (waited_ticks(pid) or 0, 0)
    # A script that ended, its time now the worker's children's: no time is lost.
    sample["waited"] = (waited_ticks("self") or 0, 0)
    return sample


def _threads(
    process: Path, skip: frozenset[int] = frozenset(), foreign: bool = False
) -> Iterator[tuple[int, tuple[int, int]]]:
    """Each thread of ``process`` not in ``skip`` (nor, with ``foreign``, named as one of
    :data:`FOREIGN_THREADS`), with its :func:`thread_activity`."""
    try:
        tids = [int(entry.name) for entry in (process / "task").iterdir()]
    except OSError:
        return  # ended
    for tid in tids:
        task = process / "task" / str(tid)
        if tid in skip or (foreign and (thread_name(task) or "").startswith(FOREIGN_THREADS)):
            continue
        if activity := thread_activity(task):
            yield tid, activity


@contextmanager
def hang_limit(
    seconds: float | None, number: int, *, caller_works: bool = True
) -> Iterator[Callable[[], None]]:
    """End this worker process (exit :data:`EXIT_HUNG`) if the trial run in the block is
    still (it did not run, and did not report) for ``seconds``; ``None``: never.

    Yields what to call at each report. ``caller_works``: the calling thread runs the
    trial's code (a training function); a script's runner only waits on the script,
    polling, and the script's processes are the trial's work.
    """
    if seconds is None or not (PROC / "self" / "task").is_dir():
        yield lambda: None
        return
    clock = time.monotonic
    stillness = Stillness(seconds, clock())
    caller = threading.get_native_id()
    stop = threading.Event()
    ready = threading.Event()
    before: set[int] = set()

    def watch() -> None:
        ready.wait()
        theirs = frozenset(before)
        while not stop.wait(watch_every(seconds)):
            if stillness.hung(own_activity(theirs, caller if caller_works else None), clock()):
                end_worker(
                    f"hpsearch: trial {number} used no CPU time and reported nothing for "
                    f"{seconds:g} s {HUNG_SAID}",
                    EXIT_HUNG,
                )

    thread = threading.Thread(target=watch, name="hpsearch-hang-watch", daemon=True)
    thread.start()
    try:
        # Every thread there now but the caller is Ray's or hpsearch's, this watch's too.
        before.update(int(entry.name) for entry in (PROC / "self" / "task").iterdir())
        ready.set()
        yield lambda: stillness.heard(clock())
    finally:
        stop.set()
        ready.set()  # a watch still waiting for the snapshot ends too
        thread.join()
