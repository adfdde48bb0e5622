"""A search's driver without Ray: the parts wired by the composition root, driven by hand.

The ``driver`` fixture (``tests/conftest.py``): ``driver(config)`` builds the
real parts (ledger, listeners, scheduler) with
:func:`hpsearch.search_parts.build_search` on a simulated runner's session, over a real
Optuna study and a real MLflow store; a test plays the runner, telling the
ledger what happens to each trial, on the session's virtual clock.
"""

from __future__ import annotations

import io
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from hpsearch import attrs
from hpsearch.config import RunConfig
from hpsearch.gpu_telemetry import OpenedTelemetry
from hpsearch.lifecycle import ParentRun, TrialLedger, check_user_code
from hpsearch.oom import OomSpec
from hpsearch.placement import Admission, ResourcePolicy
from hpsearch.runner import RunnerSession, SimulatedRunner, VirtualClock
from hpsearch.search_parts import SearchParts, build_search
from hpsearch.simulation import LoadModelBackend
from hpsearch.study import StudyHandle, open_study
from hpsearch.telemetry import ClusterReadings, GpuMonitor
from hpsearch.tracking import MlflowTracker
from hpsearch.trial.protocol import (
    EventKind,
    MemberSpec,
    Outcome,
    TrialLaunch,
    TrialSettings,
    TrialTracking,
    WorkerEvent,
)
from hpsearch.trial.script import CommandSpec

ADMISSION = Admission(cpus=1.0, gpus=0.5, reason="test")
ON_A_CPU = Admission(cpus=1.0, gpus=0.0, reason="test")


_CHECKPOINTS = tempfile.TemporaryDirectory(prefix="hpsearch-test-checkpoints-")
"""The launches' checkpoint folders (one each: a trial never finds another test's), removed
when the test process exits."""


@dataclass
class Driver:
    """The parts of one search and the study, MLflow store and clock behind them."""

    handle: StudyHandle
    parent: ParentRun
    parts: SearchParts
    session: RunnerSession
    console: Console
    monitor: GpuMonitor | None = None

    @property
    def ledger(self) -> TrialLedger:
        return self.parts.ledger

    @property
    def tracker(self) -> MlflowTracker:
        tracker = self.parent.tracker
        assert isinstance(tracker, MlflowTracker)  # the tests record to a real MLflow
        return tracker

    @property
    def clock(self) -> VirtualClock:
        clock = self.session.clock
        assert isinstance(clock, VirtualClock)
        return clock

    @property
    def printed(self) -> str:
        file = self.console.file
        assert isinstance(file, io.StringIO)
        return file.getvalue()

    def run_id(self, number: int) -> str:
        return str(self.handle.study.trials[number].user_attrs[attrs.MLFLOW_RUN])

    def launch(self, trial_id: str, admission: Admission = ADMISSION) -> TrialLaunch:
        """Open a trial (it must not be held back) and start it."""
        launch = self.ledger.open(trial_id, admission)
        assert launch is not None, "the trial was held back"
        self.ledger.started(trial_id)
        return launch

    def complete(self, trial_id: str, *scores: float) -> Outcome | None:
        """Report ``score`` at steps 0, 1, ... then end the trial COMPLETE."""
        for step, score in enumerate(scores):
            self.ledger.event(trial_id, report(step, score=score))
        self.ledger.event(trial_id, end(Outcome.COMPLETE))
        return self.ledger.ended(trial_id)


def report(step: int, **metrics: float) -> WorkerEvent:
    return WorkerEvent(kind=EventKind.REPORT, step=step, metrics=metrics)


def end(outcome: Outcome, error: str = "", **metrics: float) -> WorkerEvent:
    return WorkerEvent(kind=EventKind.END, outcome=outcome, error=error, metrics=metrics)


DriverFactory = Callable[..., Driver]


@contextmanager
def drivers() -> Iterator[DriverFactory]:
    """``make(config, policy=None, gpus=None)``: the wired parts of a search on ``config``.

    With ``gpus`` (a load model), the session has that many GPUs and a monitor
    samples them on the virtual clock (by hand: ``driver.parts`` is not running).
    """
    with ExitStack() as stack:

        def make(
            config: RunConfig,
            *,
            policy: ResourcePolicy | None = None,
            gpus: LoadModelBackend | None = None,
        ) -> Driver:
            handle = open_study(config)
            tracker = MlflowTracker(
                config.tracking.uri, config.experiment_name, config.tracking.artifact_location
            )
            execution = config.execution.model_copy(
                update={"num_gpus": len(gpus.gpus()) if gpus is not None else 0, "num_cpus": 4}
            )
            session = stack.enter_context(SimulatedRunner().connect(execution, "."))
            parent = ParentRun.start(config, handle, tracker)
            monitor = None
            telemetry = OpenedTelemetry(None, "GPU telemetry off")
            if gpus is not None:
                monitor = GpuMonitor(gpus, interval_s=1.0, clock=session.clock)
                telemetry = OpenedTelemetry(gpus, "simulated", load_sink=gpus)
            console = Console(file=io.StringIO(), width=200)
            parts = build_search(
                config,
                handle=handle,
                parent=parent,
                session=session,
                readings=ClusterReadings(session.local_node_id, monitor) if monitor else None,
                telemetry=telemetry,
                console=console,
                code=check_user_code(config),
                policy=policy,
            )
            return Driver(handle, parent, parts, session, console, monitor)

        yield make


def make_launch(
    params: dict[str, Any],
    *,
    train: str = "",
    number: int = 3,
    oom: OomSpec | None = None,
    command: CommandSpec | None = None,
    workdir: str = "",
    trial_dir: str = "",
    admission: Admission = ON_A_CPU,
    members: list[dict[str, Any]] | None = None,
    fused_train: str = "",
    tracking: TrialTracking | None = None,
) -> TrialLaunch:
    """A launch of one trial as a worker receives it (the settings of a small search); with
    ``members``, a fused launch of trials ``number``, ``number + 1``, ... with those params;
    ``tracking``: where its own MLflow calls go (``None``: MLflow's defaults)."""
    settings = TrialSettings(
        train=train,
        command=command,
        source="c.yaml",
        objectives=("score",),
        oom=oom or OomSpec(),
        timeout_s=None,
        hang_s=None,
        decision_board="",
        pace_file="",
        worker_dir="",
        workdir=workdir,
        gpu_memory_mb=None,
        fused_train=fused_train,
        study_access=None,
        tune_trainable=None,
        tracking=tracking,
        by_value={},
    )
    trials = tuple(
        MemberSpec(
            number=number + k,
            params=p,
            seed=k,
            checkpoint_dir=tempfile.mkdtemp(prefix="ckpt-", dir=_CHECKPOINTS.name),
            trial_dir=trial_dir,
        )
        for k, p in enumerate(members or [params])
    )
    return TrialLaunch(
        members=trials, settings=settings, admission=admission, stdout_file="", stderr_file=""
    )


def unactivated_environment(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A conda environment at ``folder`` that hpsearch runs from, not activated: its
    ``bin`` holds a program ``sometool``, and PATH does not have it."""
    (folder / "bin").mkdir(parents=True)
    (folder / "conda-meta").mkdir()
    tool = folder / "bin" / "sometool"
    tool.write_text('#!/bin/sh\necho \'{"step": 0, "loss": 0.5}\'\n')
    tool.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(folder / "bin" / "python"))
    monkeypatch.setattr(sys, "prefix", str(folder))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    return folder
