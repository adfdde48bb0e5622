"""When a trial is still for ``execution.hang_timeout``: the policy on an injected clock,
and what a trial's threads show of their running (``/proc``: Linux)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from hpsearch.worker._hang import Activity, Stillness, own_activity, watch_every

AT_REST = {"t1": (5, 10)}


def test_still_for_its_limit_is_hung_and_any_change_or_report_starts_it_again() -> None:
    stillness = Stillness(limit_s=10.0, now=0.0)
    assert not stillness.hung(AT_REST, 0.0)
    assert not stillness.hung(AT_REST, 9.9)
    assert stillness.hung(AT_REST, 10.0)

    stillness = Stillness(limit_s=10.0, now=0.0)
    assert not stillness.hung(AT_REST, 0.0)
    assert not stillness.hung({"t1": (5, 11)}, 8.0)  # woke once: a poll
    assert not stillness.hung({"t1": (5, 11)}, 17.9)
    stillness.heard(12.0)  # a report
    assert not stillness.hung({"t1": (5, 11)}, 21.9)
    assert stillness.hung({"t1": (5, 11)}, 22.0)
    # A thread or a process that started or ended is a change.
    assert not stillness.hung({"t1": (5, 11), "p7.7": (0, 1)}, 40.0)


def test_the_watch_reads_a_twentieth_of_its_limit_apart_within_bounds() -> None:
    assert watch_every(2.0) == 0.1
    assert watch_every(600.0) == 30.0  # the default: ended within 30 s past its limit
    assert watch_every(3600.0) == 30.0
    assert watch_every(0.1) == 0.05


def test_a_blocked_thread_shows_no_running_and_a_polling_one_does() -> None:
    before = frozenset(int(t.native_id or 0) for t in threading.enumerate())
    stop = threading.Event()
    blocked = threading.Thread(target=stop.wait, daemon=True)
    polling = threading.Thread(target=_poll, args=(stop,), daemon=True)
    blocked.start()
    polling.start()
    try:
        first = _settled(before, f"t{blocked.native_id}")  # once it waits on its event
        later = _changed(before, f"t{polling.native_id}", first)  # the poller woke
        blocked_key = f"t{blocked.native_id}"
        assert first[blocked_key] == later[blocked_key]  # blocked on its event all along
        assert f"t{threading.get_native_id()}" not in later  # in before: not the trial's
        assert f"t{threading.get_native_id()}" in own_activity(before, threading.get_native_id())
    finally:
        stop.set()
        blocked.join()
        polling.join()


def test_the_threads_grpc_starts_in_the_worker_are_not_the_trials() -> None:
    before = frozenset(int(t.native_id or 0) for t in threading.enumerate())
    stop = threading.Event()
    # gRPC's timer as Ray's worker starts it after the trial has (named by gRPC's core),
    # and a thread of the trial's own that polls likewise.
    timer = threading.Thread(target=_poll, args=(stop, "grpc_global_timer"), daemon=True)
    own = threading.Thread(target=_poll, args=(stop, "loader"), daemon=True)
    timer.start()
    own.start()
    try:
        first = _named(before, own, "loader")
        _named(before, timer, "grpc_global_tim")  # as /proc shows it: 15 characters
        later = _changed(before, f"t{own.native_id}", first)  # both have polled since
        assert f"t{own.native_id}" in later
        assert f"t{timer.native_id}" not in later
    finally:
        stop.set()
        timer.join()
        own.join()


def _named(before: frozenset[int], thread: threading.Thread, name: str) -> Activity:
    """The activity once ``thread`` has its name under ``/proc`` (it names itself)."""
    comm = Path(f"/proc/self/task/{thread.native_id}/comm")
    for _ in range(200):
        if comm.read_text().strip() == name:
            return own_activity(before, caller=None)
        time.sleep(0.01)
    raise AssertionError(f"thread {thread.native_id} never named {name}")


def _poll(stop: threading.Event, name: str | None = None) -> None:
    """Wait on ``stop`` by polling it, as ``filelock`` waits on a lock; ``name``: named
    so first, as a native library names its threads (``pthread_setname_np``)."""
    if name is not None:
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(name)
    while not stop.is_set():
        time.sleep(0.01)


def _changed(before: frozenset[int], key: str, since: Activity) -> Activity:
    """The activity once thread ``key`` has run since ``since`` (it polls every 10 ms)."""
    for _ in range(200):
        time.sleep(0.01)
        now = own_activity(before, caller=None)
        if now.get(key) != since.get(key):
            return now
    raise AssertionError(f"{key} never ran")


def _settled(before: frozenset[int], key: str) -> Activity:
    """The activity once thread ``key`` has stopped running (it blocks soon after it starts)."""
    last = own_activity(before, caller=None)
    for _ in range(200):
        time.sleep(0.01)
        now = own_activity(before, caller=None)
        if now.get(key) == last.get(key):
            return now
        last = now
    raise AssertionError(f"{key} never settled")
