"""``hpsearch.run``: the composition root, the one place where the parts of a search are wired.

A search is three steps: :func:`build_search` wires the parts (pure wiring:
nothing runs, nothing is started), the runner's session runs them, and
:func:`close_out` records what is left when the search ends, however it ends.
Each part builds itself from its own settings section (its factory lives with
it); the runner is a part like any other: Ray Tune by default, a simulated-time
runner when one is given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console

from hpsearch import interrupts
from hpsearch._importable import ensure_importable_from
from hpsearch._quiet import quiet_libraries
from hpsearch._sqlite import settle
from hpsearch.config import ExecutionSpec, RunConfig, load_config
from hpsearch.errors import HpsearchError
from hpsearch.gpu_telemetry import OpenedTelemetry, open_backend
from hpsearch.lifecycle import (
    Afresh,
    Beside,
    CheckedCode,
    FusionPlan,
    ObjectiveValues,
    OomHandling,
    ParentRun,
    RunningTrials,
    StoreWatch,
    TrialLedger,
    TrialListener,
    WorkerSide,
    check_user_code,
    land_tracking_writes,
    launches_for,
    open_tracker,
    reclaim_stale_trials,
    record_unwritten_runs,
    search_listeners,
    study_access,
    sweep_checkpoints,
)
from hpsearch.oom import OomBook
from hpsearch.placement import PackingAdmission, ResourcePolicy, resource_policy
from hpsearch.progress import ProgressView
from hpsearch.pruning import VerdictBoard, make_judge
from hpsearch.results import RunOutcome, StudyResults
from hpsearch.runner import (
    MpsDaemons,
    RunnerSession,
    TrialRunner,
    gpu_readings,
    mps_daemons,
    mps_starter,
)
from hpsearch.scheduler import Scheduler
from hpsearch.simulation import PacePublisher, parse_simulate
from hpsearch.storage_faults import Stores
from hpsearch.study import (
    BudgetCount,
    BudgetDecision,
    StudyHandle,
    TrialBudget,
    count_budget,
    open_study,
)
from hpsearch.telemetry import ClusterGpuMetrics, ClusterReadings
from hpsearch.tracking import RunStatus, Tracker
from hpsearch.trial.checkpoints import study_folder
from hpsearch.trial.other_tools import StudyAccess

__all__ = ["RunOutcome", "SearchParts", "build_search", "close_out", "run"]


@dataclass(frozen=True)
class SearchParts:
    """The parts of one search, wired and ready to run.

    Attributes:
        ledger: the open trials and Optuna's ask/tell; the runner tells it what happens.
        scheduler: what the runner asks before each trial.
        running: the trials holding resources now, as the resource policy sees them.
        view: the progress view (a context manager while the search runs).
        max_pending: most trials that may be starting at once.
        board: where pruning verdicts go (``None``: no pruner).
        placing: the packing policy's admission, when GPUs are packed.
        budget: when the search stops (the scheduler's).
        fusion: fused launches (``None``: one trial per launch).
    """

    ledger: TrialLedger
    scheduler: Scheduler
    running: RunningTrials
    view: ProgressView
    max_pending: int
    board: VerdictBoard | None = None
    placing: PackingAdmission | None = None
    budget: TrialBudget | None = None
    fusion: FusionPlan | None = None


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
        self.console.print(line, highlight=False, markup=False)


@dataclass(frozen=True)
class _Ran:
    """What the runner's session did: finished and interrupted trials, how long, why it ended."""

    finished: int
    interrupted: int
    elapsed_s: float
    timed_out: bool
    overdue: bool


def run(
    config: RunConfig | str | os.PathLike[str],
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
        config: a config file path or a loaded :class:`RunConfig`.
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
        return _search(opened, afresh, tracker)
    finally:
        if telemetry.backend is not None:
            telemetry.backend.close()


def _search(opened: _Opened, afresh: Afresh, tracker: Tracker | None) -> RunOutcome:
    """Open the study and its records, run the search, record how it ended."""
    config, say = opened.config, opened.say
    execution = opened.telemetry.execution_for(config.execution, config.source)
    handle = open_study(config, as_driver=True)
    for note in handle.notes:
        say(note)
    if tracker is None:  # not `or`: a tracker of the user's may have a length
        tracker = open_tracker(config, handle, say, afresh)
    reclaim_stale_trials(handle, tracker)
    recorded = record_unwritten_runs(handle, tracker)
    if recorded:
        say(
            f"{recorded} MLflow run(s) recorded from the study: their trials ended while "
            "the tracking server was out of reach and their search stopped"
        )
    before = count_budget(handle.study.get_trials(deepcopy=False))
    budget = TrialBudget.from_settings(config.study)
    if budget.decide(before) is BudgetDecision.FINISHED and before.running == 0:
        opened.console.print(
            f"study '{handle.name}' already has {before.finished} finished trials "
            f"(study.n_trials is {config.study.n_trials}): nothing to do; "
            "raise study.n_trials or pass --n-trials to run more"
        )
        return RunOutcome(StudyResults(handle.study), None, 0, 0)

    parent = ParentRun.start(config, handle, tracker)
    telemetry = opened.telemetry
    on_cpu = telemetry.backend is None
    say(f"{telemetry.line}; trials run on CPU" if on_cpu else telemetry.line)
    status = RunStatus.FAILED
    try:
        ran = _run_parts(opened, execution, handle, parent, before)
        status = RunStatus.KILLED if ran.interrupted else RunStatus.FINISHED
    except KeyboardInterrupt:
        status = RunStatus.KILLED
        raise
    finally:
        parent.end(status)
        land_tracking_writes(config, tracker, say)
        for store in (config.study.storage, config.tracking.uri):
            settle(store)

    trials = handle.study.get_trials(deepcopy=False)
    sweep_checkpoints(
        handle.study, study_folder(config.execution.checkpoint_dir, config.study.name), trials
    )
    # What this driver finished itself (another driver may share the study).
    return RunOutcome(
        StudyResults(handle.study),
        parent.run_id,
        ran.finished,
        ran.interrupted,
        ran.elapsed_s,
        timed_out=ran.timed_out,
        overdue=ran.overdue,
        short_of=budget.short_of(count_budget(trials)),
        mlflow_experiment_id=tracker.experiment_id,
    )


def _run_parts(
    opened: _Opened,
    execution: ExecutionSpec,
    handle: StudyHandle,
    parent: ParentRun,
    before: BudgetCount,
) -> _Ran:
    """The runner's session, what runs beside it, and the parts it runs, until the search ends."""
    config, telemetry = opened.config, opened.telemetry

    def mps_said(detail: str) -> None:
        parent.set_tags({"hpsearch.mps": detail})

    with (
        opened.runner.connect(execution, opened.workdir, config.telemetry.simulating) as session,
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
            before=before,
            mps=mps,
            study_access=access,
        )
        # Where a SIGTERM stopped the runner's processes too, what Ctrl-C records
        # is recorded without them (the runner then exits 143).
        session.on_lost(lambda: _close_without_runner(parts, parent, readings, handle))
        started = session.clock()
        try:
            with parts.view:
                session.run(
                    parts.scheduler, parts.ledger, name=parent.name, max_pending=parts.max_pending
                )
        finally:
            elapsed = session.clock() - started
            # However the search ended, while the runner still runs: record every
            # trial still open, so nothing already run is lost.
            budget = parts.budget
            reason = budget.overdue_line() if budget is not None else None
            interrupted = close_out(parts, parent, readings, handle, reason)
            timed_out = budget is not None and budget.timed_out()
            overdue = budget is not None and budget.overdue()
    return _Ran(parts.ledger.finished, interrupted, elapsed, timed_out, overdue)


def build_search(
    config: RunConfig,
    *,
    handle: StudyHandle,
    parent: ParentRun,
    session: RunnerSession,
    readings: ClusterReadings | None,
    telemetry: OpenedTelemetry,
    console: Console,
    code: CheckedCode,
    policy: ResourcePolicy | None = None,
    before: BudgetCount | None = None,
    mps: MpsDaemons | None = None,
    study_access: StudyAccess | None = None,
    listeners: Sequence[TrialListener] = (),
) -> SearchParts:
    """Wire the parts of a search: the ledger, its listeners, the policy and the scheduler.

    Pure wiring: nothing runs and nothing is started (the runner's session is
    asked for its clock, its resources and a verdict board). ``code`` is what
    :func:`~hpsearch.lifecycle.check_user_code` found of the config's code;
    ``listeners`` are told after the search's own.
    """
    earlier = handle.study.get_trials(deepcopy=False)  # read once for every part below
    judge = make_judge(config.study.pruner, config.objective_list, handle.study, config.source)
    board = session.verdict_board() if judge is not None else None
    view = ProgressView.for_search(config, handle.study, before, console, session.clock)
    placing = None
    if policy is None:
        policy, placing = resource_policy(
            config.packing_in_effect,
            config.execution,
            gpus=session.capacity().gpus,
            nodes=lambda: session.gpu_nodes(readings.monitored() if readings is not None else {}),
            readings=readings,
            observers=[view, parent],
            shared=mps_starter(mps, session.local_node_id),
            clock=session.clock,
        )
    pace = _pace(telemetry, session, readings)
    side = WorkerSide(
        decision_board=board.name if board is not None else "",
        pace_file=str(pace.path) if pace is not None else "",
        worker_dir=str(session.scratch) if session.scratch is not None else "",
        gpu_memory_mb=telemetry.smallest_memory_mb,
        study_access=study_access,
    )
    oom = OomHandling(OomBook(config.oom, earlier, side.gpu_memory_mb), handle, earlier)
    running = RunningTrials(config.oom.grows_memory, earlier, feedback=placing, clock=session.clock)
    gpu = None
    if readings is not None:
        sink = pace or telemetry.load_sink
        gpu = ClusterGpuMetrics(readings, local_sink=sink, sharing=telemetry.sharing)
    beside = Beside(oom, running, view, gpu, board, side.worker_dir, tuple(listeners))
    launches = launches_for(config, code, side, session.clock)
    ledger = TrialLedger(
        handle,
        space=config.search_space,
        objectives=ObjectiveValues(config.objective_list, config.source),
        launches=launches,
        judge=judge,
        listeners=search_listeners(config, handle.name, parent, beside, session.clock),
        clock=session.clock,
    )
    budget = TrialBudget.from_settings(config.study, session.clock)
    scheduler = Scheduler(
        ledger,
        running=running,
        policy=policy,
        budget=budget,
        capacity=session.capacity,
        runs_alone=oom.next_runs_alone,
        clock=session.clock,
    )
    max_pending = config.execution.max_pending(session.capacity().cpus)
    return SearchParts(
        ledger, scheduler, running, view, max_pending, board, placing, budget, launches.fusion
    )


PACE_FILE = "simulated-gpu-pace.json"
"""Where, in the runner's scratch folder, simulated GPUs publish the trials' pace."""


def _pace(
    telemetry: OpenedTelemetry, session: RunnerSession, readings: ClusterReadings | None
) -> PacePublisher | None:
    """Where simulated trials played in real time read their pace (``None``: none do)."""
    if readings is None or telemetry.load_sink is None or session.scratch is None:
        return None
    return PacePublisher(
        telemetry.load_sink, session.scratch / PACE_FILE, cores=session.capacity().cpus
    )


def _close_without_runner(
    parts: SearchParts, parent: ParentRun, readings: ClusterReadings | None, handle: StudyHandle
) -> None:
    """Ctrl-C's records of a search whose runner is gone: trials queued again, runs KILLED."""
    close_out(parts, parent, readings, handle)
    parent.end(RunStatus.KILLED)


def close_out(
    parts: SearchParts,
    parent: ParentRun,
    readings: ClusterReadings | None,
    handle: StudyHandle,
    reason: str | None = None,
) -> int:
    """Record what is left when a search ends; return how many trials were interrupted.

    Args:
        reason: why trials still running were interrupted (``None``: the search stopped).
    """
    interrupted = parts.ledger.interrupt_open(reason)
    if parts.board is not None:
        parts.board.close()
    monitor = readings.local if readings is not None else None
    if monitor is not None:
        monitor.stop()
        parent.record_gpu_report(monitor)
    fusion = parts.fusion.sizer if parts.fusion is not None else None
    parent.record_packing(parts.placing, fusion)
    parent.record_analysis(StudyResults(handle.study))
    return interrupted
