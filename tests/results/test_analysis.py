"""The analysis figures are drawn in a process of their own, and in the driver where it cannot."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
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


def _nice_of_threads(pid: int) -> dict[int, int]:
    """Each thread of ``pid`` and its nice value, as Linux's ``/proc`` shows them."""
    nices = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            fields = (task / "stat").read_text().rpartition(")")[2].split()
            nices[int(task.name)] = int(fields[16])
    return nices


@pytest.mark.process
def test_the_figure_process_imports_at_the_lowest_priority_and_draws_at_the_drivers() -> None:
    process = FigureProcess.start()
    try:
        seen: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and 19 not in seen.values() and process.alive:
            seen.update(_nice_of_threads(process.pid))
            time.sleep(0.02)
    finally:
        process.stop()
    assert 19 in seen.values(), seen  # the thread that imports the figure libraries
    assert seen[process.pid] == 0  # the main thread, which draws while the driver waits


@pytest.mark.process
def test_the_figure_process_draws_the_pages_the_driver_would() -> None:
    study = _study()
    process = FigureProcess.start(import_nice=0)  # not starved by the tests beside it
    try:
        assert process.ready(wait_s=120)
        reply = process.draw(StudyResults(study))
        assert reply.error is None
        assert _pages(list(reply.pages)) == _pages(list(analysis_pages(StudyResults(study))))
        assert process.alive  # it serves the next search too
        # One that does not answer in time is stopped.
        with pytest.raises(TimeoutError):
            process.draw(StudyResults(study), timeout_s=0.0)
        assert not process.alive
    finally:
        process.stop()


@pytest.mark.process
def test_figures_are_drawn_here_while_the_process_still_imports_their_libraries() -> None:
    shared = SharedFigures(loaded_here=lambda: False)
    shared.start()
    started = shared.process
    assert started is not None
    study = _study()
    # At once: its imports take seconds, and the driver does not wait on them.
    assert _pages(shared.pages(StudyResults(study))) == _pages(
        list(analysis_pages(StudyResults(study)))
    )
    assert not started.alive  # no longer needed: the libraries are imported here now
    assert shared.process is None


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


@pytest.mark.process
def test_the_figure_process_of_a_killed_driver_ends() -> None:
    driver = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\n"
            "from hpsearch.results._figure_process import FigureProcess\n"
            "print(FigureProcess.start().pid, flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert driver.stdout is not None
    helper = int(driver.stdout.readline())
    driver.kill()  # SIGKILL: no exit handler runs
    driver.wait()
    # Its input closed with the driver: it reads the end, whatever its imports are at.
    gone_by = time.monotonic() + 30
    while time.monotonic() < gone_by and psutil.pid_exists(helper):
        if psutil.Process(helper).status() == psutil.STATUS_ZOMBIE:
            break  # ended; its parent (the test's init) reaps it
        time.sleep(0.2)
    assert not psutil.pid_exists(helper) or (
        psutil.Process(helper).status() == psutil.STATUS_ZOMBIE
    )
