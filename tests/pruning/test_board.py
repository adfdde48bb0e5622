"""Verdicts on their way to workers: waiting, timing out, forgetting; the worker's oracle."""

from __future__ import annotations

import asyncio

import pytest

from hpsearch.pruning import LocalVerdictBoard, VerdictBook, verdict_oracle


def test_a_posted_verdict_is_read_and_a_missing_one_times_out() -> None:
    async def scenario() -> tuple[bool | None, bool | None, bool | None]:
        book = VerdictBook()
        await book.post(3, 1, True)
        posted = await book.wait(3, 1, timeout_s=1.0)
        missing = await book.wait(3, 2, timeout_s=0.01)  # the driver never answered
        await book.forget(3)
        forgotten = await book.wait(3, 1, timeout_s=0.01)
        return posted, missing, forgotten

    assert asyncio.run(scenario()) == (True, None, None)


def test_a_worker_waiting_for_a_verdict_gets_it_when_it_is_posted() -> None:
    async def scenario() -> bool | None:
        book = VerdictBook()
        waiting = asyncio.ensure_future(book.wait(0, 4, timeout_s=5.0))
        await asyncio.sleep(0)  # the worker is waiting before the driver posts
        await book.post(0, 4, False)
        return await waiting

    assert asyncio.run(scenario()) is False


def test_no_verdict_keeps_the_trial_going_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    board = LocalVerdictBoard()
    board.post(5, 0, True)
    should_prune = verdict_oracle(5, board.verdict)
    assert should_prune(0) is True
    assert should_prune(1) is False
    assert "trial 5: no pruning verdict for step 1; going on" in caplog.text
    board.forget(5)
    assert board.verdict(5, 0) is None
