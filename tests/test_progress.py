"""The progress view: counts, the best so far, and how long the running trials have run."""

from __future__ import annotations

import io
from typing import Any

import optuna
from rich.console import Console

from hpsearch.config import ObjectiveSpec
from hpsearch.lifecycle import TrialEnded, TrialReported, TrialStarted
from hpsearch.placement import Admission
from hpsearch.progress import RUNNING_SHOWN, ProgressView, best_so_far
from hpsearch.pruning import KEEP
from hpsearch.runner import VirtualClock
from hpsearch.study import BudgetCount
from hpsearch.trial.protocol import Outcome


def _started(number: int, at: float) -> TrialStarted:
    trial: Any = None  # the view reads only the number and the time
    return TrialStarted(number, trial, {}, Admission(cpus=1, gpus=0, reason=""), at)


def test_the_status_line_times_each_running_trial_with_its_latest_step() -> None:
    clock = VirtualClock(1000.0)
    view = ProgressView(
        "study",
        [ObjectiveSpec(metric="score", direction="maximize")],
        n_trials=4,
        already=BudgetCount(0, 0),
        console=Console(file=io.StringIO()),
        clock=clock,
    )
    assert "running:" not in view.status_line()
    view.on_started(_started(0, 1000.0))
    clock.now += 30
    view.on_started(_started(1, clock.now))
    clock.now += 35
    assert "2 running" in view.status_line()
    assert view.status_line().endswith("running: trial 0 1:05, trial 1 0:35")
    clock.now += 3600
    assert view.status_line().endswith("running: trial 0 1:01:05, trial 1 1:00:35")
    view.on_reported(TrialReported(1, 4, {"score": 0.91234, "loss": 0.3}, False, KEEP))
    view.on_reported(TrialReported(0, 7, {"loss": 0.2}, False, KEEP))
    assert view.status_line().endswith(
        "running: trial 0 1:01:05 (step 7), trial 1 1:00:35 (step 4 score 0.9123)"
    )
    for number in range(2, 2 + RUNNING_SHOWN):  # a packed GPU: the longest few, and a count
        view.on_started(_started(number, clock.now))
    assert view.status_line().endswith("trial 2 0:00, trial 3 0:00 (+2 more)")


def test_a_trials_line_gives_a_long_reason_whole_or_cut_at_a_word_with_an_ellipsis() -> None:
    out = io.StringIO()
    view = ProgressView(
        "study",
        [ObjectiveSpec(metric="score", direction="maximize")],
        n_trials=2,
        already=BudgetCount(0, 0),
        console=Console(file=out, width=400),
        clock=VirtualClock(1000.0),
    )
    short = "ValueError: x must be positive"
    long = "train finished without reporting " + "the objective metric 'score', " * 8 + "or fix it"
    # A worker that died: its record's first line says how, as hpsearch trials says it.
    died = (
        "trial worker died: exit code 0\nRay: The actor died unexpectedly.\n"
        "The actor is dead because its worker process has died."
    )
    for number, error in enumerate((short, long, died)):
        view.on_ended(
            TrialEnded(
                number, Outcome.FAIL, None, {}, {}, {}, Admission(1, 0, ""), 0.5, error=error
            )
        )
    first, second, third = out.getvalue().splitlines()[:3]
    assert f"FAIL {short} (0.5s)" in first
    assert "trial 2 FAIL trial worker died: exit code 0 (0.5s)" in third
    assert "FAIL train finished without reporting the objective metric 'score'" in second
    kept, _, after = second.partition("… (0.5s)")
    assert after, second
    assert kept[-1] not in " ,", kept  # cut at a word's end, its comma dropped
    assert len(kept) < len(long) + len("trial 1 FAIL ")


def test_the_best_so_far_is_the_studys_which_keeps_its_constraints() -> None:
    # Optuna's best_trial skips a trial that breaks a constraint; the line names the
    # trial hpsearch best will, not the lowest value.
    study = optuna.create_study(direction="minimize")
    view = ProgressView(
        "study",
        [ObjectiveSpec(metric="loss", direction="minimize")],
        n_trials=3,
        already=BudgetCount(0, 0),
        best=lambda: best_so_far(study),
        console=Console(file=io.StringIO()),
        clock=VirtualClock(1000.0),
    )
    for number, (loss, constraint) in enumerate([(5.0, 1.0), (3.0, 0.0), (1.0, 2.0)]):
        trial = study.ask()
        trial.set_constraint("memory_gb_over_8", constraint)
        study.tell(trial, loss)
        ended = TrialEnded(number, Outcome.COMPLETE, (loss,), {}, {}, {}, Admission(1, 0, ""), 0.5)
        view.on_ended(ended)
        if number == 0:
            assert "no completed trial keeps its constraints yet" in view.status_line()
    assert "best loss 3 (trial 1)" in view.status_line()
