"""What a trial past execution.trial_timeout or execution.hang_timeout failed with."""

from __future__ import annotations

from hpsearch.lifecycle._deadline import hung_error, stopped_late, timeout_error
from hpsearch.lifecycle._events import kept_error
from hpsearch.trial.death import headline


def test_a_limits_record_leads_with_what_happened_whatever_follows_it() -> None:
    timed_out = timeout_error(30, 4, killed=True)
    assert timed_out.startswith("timeout: ran past execution.trial_timeout (30 s) did not end")
    assert timed_out.endswith("last reported step: 4")
    assert headline(f"{timed_out}\nRay: the actor died") == timed_out
    hung = hung_error(600, None)
    assert "execution.hang_timeout (600 s)" in hung
    assert "last reported step: none" in hung
    assert headline(f"{hung}\nRay: the actor died") == hung
    # Ctrl-C while a trial hung past its limit: the same record; within it, none.
    assert stopped_late(100.0, 2, 30, now=131.0) == timeout_error(30, 2, killed=False)
    assert stopped_late(100.0, 2, 30, now=129.0) == ""


def test_a_record_cut_to_its_limit_still_shows_its_exception() -> None:
    frames = "".join(f'  File "train.py", line {n}, in step\n    x = f(x)\n' for n in range(40))
    traceback = f"Traceback (most recent call last):\n{frames}ValueError: bad width\n"
    kept = kept_error(traceback, 300)
    assert len(kept) <= 300
    assert "characters left out" in kept
    assert headline(kept) == "ValueError: bad width"
