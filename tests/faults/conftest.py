"""Fault tests drive real processes: a driver started as a user starts it, real signals."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from hpsearch import attrs
from tests.conftest import ConfigWriter, wait_for


class Drivers:
    """``hpsearch run`` processes started for a test, each in its own process group.

    Whatever a test leaves running (a killed driver's Ray, say) is killed at the end.
    """

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def start(
        self, config: Path, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """Start ``hpsearch run CONFIG`` in the background (``env``: its whole environment)."""
        process = subprocess.Popen(
            [sys.executable, "-m", "hpsearch", "run", str(config), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env=env,
        )
        self.started.append(process)
        return process

    def cleanup(self) -> None:
        for process in self.started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()


@pytest.fixture
def drivers(project: Path) -> Iterator[Drivers]:
    """Start drivers in the test's project; kill whatever they leave behind."""
    started = Drivers()
    try:
        yield started
    finally:
        started.cleanup()


def study_trials(
    name: str = "test-study", *, while_running: bool = True
) -> list[optuna.trial.FrozenTrial]:
    """The study's trials as stored (empty while the store is not there yet).

    Args:
        while_running: a driver may be creating the store: wait for its MLflow store,
            which it creates once the Optuna one is complete.
    """
    if while_running and not Path("mlruns/mlflow.db").exists():
        return []
    try:
        return optuna.load_study(study_name=name, storage="sqlite:///mlruns/optuna.db").trials
    except KeyError:
        return []


def two_long_trials_running(write_config: ConfigWriter, drivers: Drivers) -> subprocess.Popen[str]:
    """A driver started on trials of a minute each, once two of them run: the search a
    fault that stops it is tried on."""
    path = write_config(
        {
            "train": "tests.train_functions:timed",
            "space": {"sleep": 60, "steps": None},
            "study": {"n_trials": 4},
        }
    )
    driver = drivers.start(path)

    def two_running() -> bool:
        return sum(attrs.MLFLOW_RUN in t.user_attrs for t in study_trials()) == 2

    wait_for(two_running, 240, "two trials to start", process=driver)
    return driver


def interrupted_and_queued_again(
    trials: list[optuna.trial.FrozenTrial],
) -> list[optuna.trial.FrozenTrial]:
    """The trials a stopped search interrupted (FAIL, outcome ``interrupted``), checked to
    each have its re-run queued (WAITING, naming it)."""
    interrupted = [t for t in trials if t.state.name == "FAIL"]
    assert all(t.user_attrs[attrs.OUTCOME] == "interrupted" for t in interrupted)
    retries = [t for t in trials if t.state.name == "WAITING"]
    assert sorted(t.user_attrs[attrs.RETRY_OF] for t in retries) == sorted(
        t.number for t in interrupted
    )
    return interrupted


class Mount:
    """A tmpfs of a given size, mounted for a test: a disk that fills, or turns read-only."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def remount(self, options: str) -> None:
        """``mount -o remount,OPTIONS`` (e.g. ``ro``, ``size=64m``)."""
        subprocess.run(["mount", "-o", f"remount,{options}", str(self.path)], check=True)


@pytest.fixture
def tmpfs(project: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Mount]:
    """A 3 MiB tmpfs as the project folder (skipped where this user may not mount): the two
    stores, their write-ahead logs, and room for a few dozen trials' records."""
    folder = project / "disk"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    monkeypatch.chdir(folder)
    try:
        yield Mount(folder)
    finally:
        monkeypatch.chdir(project)
        subprocess.run(["umount", "-l", str(folder)], check=False)


def record_figures(**figures: object) -> None:
    """Append a fault's figures for ``scripts/bench_faults.py`` (when it runs the suite)."""
    path = os.environ.get("HPSEARCH_FAULT_FIGURES")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(figures) + "\n")
