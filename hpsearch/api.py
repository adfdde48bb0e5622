"""``hpsearch.run``: the entry of the composition root, the one place where a search is wired.

A search is four steps: its records open (:class:`~hpsearch.lifecycle.SearchRecords`:
the study, then the tracker while the runner's session starts, a local Ray's
processes taking seconds the driver would otherwise only wait; the parent run
once the session is up), the session opens what runs beside it (MPS, the GPU readings, the study's
access for other tools), :func:`~hpsearch.search_parts.build_search` wires the
parts (pure wiring: nothing runs, nothing is started) and the session runs them until
:func:`~hpsearch.search_parts.close_out` records what is left, however it ends.
Each part builds itself from its own settings section (its factory lives with
it); the runner is a part like any other: Ray Tune by default, a simulated-time
runner when one is given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from hpsearch import interrupts
from hpsearch._early import entered_early
from hpsearch._importable import ensure_importable_from
from hpsearch._quiet import quiet_libraries
from hpsearch._secrets import without_passwords
from hpsearch.config import RunConfig, load_config
from hpsearch.errors import HpsearchError
from hpsearch.gpu_telemetry import OpenedTelemetry, open_backend
from hpsearch.lifecycle import (
    Afresh,
    CheckedCode,
    ParentRun,
    SearchEnd,
    SearchRecords,
    StoreWatch,
    TrialListener,
    check_user_code,
    study_access,
)
from hpsearch.placement import ResourcePolicy
from hpsearch.results import RunOutcome
from hpsearch.runner import RunnerSession, TrialRunner, gpu_readings, mps_daemons
from hpsearch.search_parts import SearchParts, build_search, close_out, run_parts
from hpsearch.simulation import parse_simulate
from hpsearch.storage_faults import Stores
from hpsearch.tracking import Tracker

# The wiring's names stay importable from here, where they were.
__all__ = ["RunOutcome", "SearchParts", "build_search", "close_out", "run"]


@dataclass(frozen=True)
class _Given:
    """The parts the caller of :func:`run` gave, in place of or beside hpsearch's own."""

    policy: ResourcePolicy | None = None
    listeners: tuple[TrialListener, ...] = ()


@dataclass(frozen=True)
class _Opened:
    """What the root opened before the search, handed from step to step."""

    config: RunConfig
    console: Console
    runner: TrialRunner
    telemetry: OpenedTelemetry
    code: CheckedCode
    workdir: str
    given: _Given

    def say(self, line: str) -> None:
        # A store's URL in a line (an outage, a storage fault) shows no password.
        self.console.print(without_passwords(line), highlight=False, markup=False)


def run(
    config: RunConfig | Mapping[str, Any] | str | os.PathLike[str],
    *,
    address: str | None = None,
    n_trials: int | None = None,
    timeout: float | None = None,
    policy: ResourcePolicy | None = None,
    console: Console | None = None,
    simulate: str | None = None,
    runner: TrialRunner | None = None,
    new_mlflow_history: bool = False,
    tracker: Tracker | None = None,
    allow_space_change: bool = False,
    new_study: bool = False,
    listeners: Sequence[TrialListener] = (),
) -> RunOutcome:
    """Run (or continue) the search a config describes, until its budget is spent.

    Args:
        config: a config file path, a dict of the same sections (from a notebook,
            say: it may hold its functions themselves, sent to the workers by value
            where none could import them), or a loaded :class:`RunConfig`.
        address: a Ray cluster to join (overrides ``execution.address``).
        n_trials: total trials the study should reach (overrides ``study.n_trials``).
        timeout: seconds after which no new trial starts (overrides ``study.timeout``).
        policy: the resource policy; default: from ``execution`` and ``packing``.
        console: where the progress view draws.
        simulate: run against simulated GPUs (overrides ``telemetry``): a built-in
            trace name, a CSV trace, or ``load[:key=value,...]``/``constant[:...]``.
        runner: where trials run; default: Ray Tune (``hpsearch.runner.RayTuneRunner``).
        new_mlflow_history: go on although the MLflow store the study's trials were
            recorded in is gone (a new one is started; their old run ids dangle).
        tracker: where runs are recorded; default: MLflow, as ``tracking`` says
            (:class:`hpsearch.tracking.MemoryTracker` keeps them in memory, as the
            packing lab does).
        allow_space_change: a parameter's range may differ from the study's
            (``study.allow_space_change``).
        new_study: start the study afresh although its MLflow experiment holds runs of
            its trials from an earlier search (the study's file deleted or replaced).
        listeners: more of the search's listeners (:class:`hpsearch.lifecycle.TrialListener`),
            told of every trial's events after hpsearch's own.

    Raises:
        HpsearchError: anything the user can fix (the CLI exits with code 2), a
            tracking server out of reach past ``tracking.outage_limit`` included (the
            search stopped as on Ctrl-C first).
    """
    interrupts.clear_stop()
    if not isinstance(config, RunConfig):
        config = load_config(config)
    simulated = None
    if simulate is not None:
        try:
            simulated = parse_simulate(simulate)
        except ValueError as exc:
            raise HpsearchError(f"--simulate: {exc}") from None
    config = config.with_overrides(
        n_trials=n_trials,
        timeout=timeout,
        address=address,
        simulate=simulated,
        allow_space_change=allow_space_change,
    )
    if runner is None:
        from hpsearch.runner import RayTuneRunner

        runner = RayTuneRunner()
    with quiet_libraries():
        try:
            afresh = Afresh(mlflow_history=new_mlflow_history, study=new_study)
            parts = _Given(policy, tuple(listeners))
            outcome = _run(config, parts, console or Console(), runner, afresh, tracker)
        except KeyboardInterrupt:
            _raise_stopped_for()
            raise
        _raise_stopped_for()
        return outcome


def _raise_stopped_for() -> None:
    """A search stopped for a fault it could not go on with (its tracking server gone past
    ``tracking.outage_limit``) ends as an error the user can fix: its one line."""
    reason = interrupts.stopped_for()
    if reason is not None:
        raise HpsearchError(reason) from None


def _run(  # noqa: PLR0917 - the public entry's arguments, handed on
    config: RunConfig,
    given: _Given,
    console: Console,
    runner: TrialRunner,
    afresh: Afresh,
    tracker: Tracker | None = None,
) -> RunOutcome:
    workdir = os.getcwd()
    ensure_importable_from(workdir)
    code = check_user_code(config)  # one line here rather than a failure in every worker
    runner.check(config)
    telemetry = open_backend(config.telemetry)  # opening a backend is the root's job
    try:
        opened = _Opened(config, console, runner, telemetry, code, workdir, given)
        for note in code.notes:
            opened.say(note)
        return _search(opened, afresh, tracker)
    finally:
        if telemetry.backend is not None:
            telemetry.backend.close()


def _search(opened: _Opened, afresh: Afresh, tracker: Tracker | None) -> RunOutcome:
    """Open the study, then its tracker while the runner's session starts (where the study
    has work), run the search, keep what it did."""
    config, telemetry = opened.config, opened.telemetry
    execution = telemetry.execution_for(config.execution, config.source)
    with SearchRecords.opening(config, opened.say, afresh, tracker) as opening:
        done = None if opening.has_work else opening.records().nothing_to_do()
        if done is not None:  # at its budget: said so, and no runner started for it
            return done
        connecting = opened.runner.connect(execution, opened.workdir, config.telemetry.simulating)
        with entered_early(connecting) as session:  # a failure to start fails the search
            records = opening.records()
            done = records.nothing_to_do()
            if done is not None:
                return done
            return records.run(lambda parent: _run_parts(opened, session.get(), records, parent))


def _run_parts(
    opened: _Opened, session: RunnerSession, records: SearchRecords, parent: ParentRun
) -> SearchEnd:
    """What runs beside the runner's session, and the parts it runs, until the search ends."""
    config, telemetry, handle = opened.config, opened.telemetry, records.handle
    opened.say(telemetry.search_line(session.capacity().gpus, cpu_only=config.packing.cpu_only))

    def mps_said(detail: str) -> None:
        parent.set_tags({"hpsearch.mps": detail})

    with (
        mps_daemons(config, telemetry.backend, session, opened.say, mps_said) as mps,
        gpu_readings(config, telemetry.backend, session, opened.say) as readings,
        study_access(config, handle, session.driver_address) as access,
        StoreWatch(Stores(config.source, config.study.storage, config.tracking.uri)),
    ):
        parts = build_search(
            config,
            handle=handle,
            parent=parent,
            session=session,
            readings=readings,
            telemetry=telemetry,
            console=opened.console,
            code=opened.code,
            policy=opened.given.policy,
            listeners=opened.given.listeners,
            before=records.before,
            mps=mps,
            study_access=access,
        )
        return run_parts(parts, session, parent, readings)
