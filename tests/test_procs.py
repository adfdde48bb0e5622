"""The process table read from /proc."""

from __future__ import annotations

import os

from hpsearch._procs import descendants, group_running, processes, start_time


def test_this_process_is_below_its_parent_and_its_group_runs() -> None:
    assert os.getpid() in descendants(os.getppid())
    me = next(p for p in processes() if p.pid == os.getpid())
    assert (me.ppid, me.pgrp) == (os.getppid(), os.getpgrp())
    assert group_running(os.getpgrp()) is True
    assert group_running(2**22 + 12345) is False  # no such group (above Linux's pid_max)


def test_a_process_is_known_by_its_start_time_and_a_missing_one_has_none() -> None:
    mine = start_time(os.getpid())
    assert mine is not None
    assert start_time(os.getppid()) is not None
    assert start_time(os.getppid()) <= mine  # type: ignore[operator]
    assert start_time(2**22 + 12345) is None
