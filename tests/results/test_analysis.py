"""The analysis figures are drawn in a process of their own, and in the driver where it cannot."""

from __future__ import annotations

import os
import re

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from hpsearch.results import StudyResults
from hpsearch.results._figure_process import (
    FigureProcess,
    SharedFigures,
    analysis_pages,
    rebuilt_study,
    request_of,
)

_DIV_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _study() -> optuna.Study:
    """Two objectives, trials of every state, the user attributes hpsearch keeps."""
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.set_metric_names(["accuracy", "seconds"])
    width = optuna.distributions.CategoricalDistribution([64, 128, 256])
    lr = optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)
    for number in range(24):
        state = [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL][
            number % 4
        ]
        complete = state is TrialState.COMPLETE
        study.add_trial(
            create_trial(
                state=state,
                params={"width": [64, 128, 256][number % 3], "lr": 10 ** (-1 - number % 3)},
                distributions={"width": width, "lr": lr},
                values=[0.5 + number / 100, 10.0 - number % 5] if complete else None,
                user_attrs={"hpsearch.mlflow_run": f"run-{number}"},
                intermediate_values={0: 0.1} if state is TrialState.PRUNED else None,
            )
        )
    return study


def _pages(pages: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The pages without plotly's random element ids."""
    return [(artifact, _DIV_ID.sub("ID", html)) for artifact, html in pages]


def test_the_rebuilt_study_draws_what_the_study_draws() -> None:
    study = _study()
    rebuilt = rebuilt_study(request_of(StudyResults(study)))
    assert [t.number for t in rebuilt.trials] == [t.number for t in study.trials]
    assert [t.state for t in rebuilt.trials] == [t.state for t in study.trials]
    assert [t.values for t in rebuilt.trials] == [t.values for t in study.trials]
    assert rebuilt.metric_names == ["accuracy", "seconds"]
    here = _pages(list(analysis_pages(StudyResults(study))))
    assert len(here) == 7  # the front, and history, importances, coordinates of each
    assert _pages(list(analysis_pages(StudyResults(rebuilt)))) == here


@pytest.mark.process
def test_the_figure_process_draws_the_pages_the_driver_would() -> None:
    study = _study()
    process = FigureProcess.start()
    try:
        reply = process.draw(StudyResults(study))
        assert reply.error is None
        assert _pages(list(reply.pages)) == _pages(list(analysis_pages(StudyResults(study))))
        assert process.alive  # it serves the next search too
        # Its imports take only a core nobody else wants (a starting trial worker does).
        assert os.getpriority(os.PRIO_PROCESS, process.pid) == 19
    finally:
        process.close()
    assert not process.alive


@pytest.mark.process
def test_a_figure_process_that_does_not_answer_in_time_is_stopped() -> None:
    process = FigureProcess.start()
    with pytest.raises(TimeoutError):
        process.draw(StudyResults(_study()), timeout_s=0.0)
    assert not process.alive


@pytest.mark.process
def test_where_the_figure_process_ended_the_driver_draws_the_figures() -> None:
    shared = SharedFigures(loaded_here=lambda: False)
    shared.start()
    started = shared.process
    assert started is not None
    assert started.alive
    started.stop()  # killed: the pages still come, drawn here
    study = _study()
    assert _pages(shared.pages(StudyResults(study))) == _pages(
        list(analysis_pages(StudyResults(study)))
    )
    assert shared.process is None  # the next search starts a fresh one


def test_where_the_libraries_are_imported_here_no_process_starts() -> None:
    shared = SharedFigures(loaded_here=lambda: True)
    shared.start()  # make check refuses any process a test starts: none is
    assert shared.process is None
    assert len(shared.pages(StudyResults(_study()))) == 7
