"""``hpsearch.run``: the composition root, the one place where the parts of a search are wired.

A search is three steps: :func:`build_search` wires the parts (pure wiring:
nothing runs, nothing is started), the runner's session runs them, and
:func:`close_out` records what is left when the search ends, however it ends.
The runner is a part like any other: Ray Tune by default, a simulated-time
runner when one is given.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from hpsearch import attrs, interrupts
from hpsearch._importable import ensure_importable_from
from hpsearch._sqlite import settle
from hpsearch.config import ExecutionSpec, RunConfig, load_config
from hpsearch.errors import ConfigError, HpsearchError
from hpsearch.gpu_telemetry import OpenedTelemetry, open_backend
from hpsearch.lifecycle import (
    CheckpointKeeper,
    FusionPlan,
    GpuSeries,
    Launches,
    MlflowMirror,
    ObjectiveValues,
    OomHandling,
    OutageLimit,
    ParentRun,
    RunningTrials,
    StoreWatch,
    TrialLedger,
    TrialListener,
    VerdictPoster,
    outage_line,
    reclaim_stale_trials,
    record_unwritten_runs,
    sweep_checkpoints,
)
from hpsearch.oom import OomBook
from hpsearch.placement import (
    AdmissionRequest,
    FusionSizer,
    GpuKey,
    PackingAdmission,
    PackingObserver,
    PackingPolicy,
    ResourcePolicy,
    StaticPolicy,
)
from hpsearch.progress import ProgressView
from hpsearch.pruning import VerdictBoard, make_judge
from hpsearch.results import StudyResults
from hpsearch.runner import MpsDaemons, RunnerSession, TrialRunner
from hpsearch.scheduler import Scheduler
from hpsearch.simulation import PacePublisher, SimulatedSpec, parse_simulate
from hpsearch.storage_faults import Stores
from hpsearch.study import (
    BudgetCount,
    BudgetDecision,
    StudyHandle,
    TrialBudget,
    count_budget,
    open_study,
    serve_study,
)
from hpsearch.telemetry import ClusterGpuMetrics, ClusterReadings, GpuMonitor, TelemetryBackend
from hpsearch.tracking import (
    MlflowTracker,
    OutageTracker,
    RunStatus,
    Tracker,
    use_quick_http_settings,
)
from hpsearch.trial.checkpoints import study_folder
from hpsearch.trial.entrypoint import check_fusion, check_train
from hpsearch.trial.other_tools import StudyAccess
from hpsearch.trial.protocol import TrialSettings


@dataclass(frozen=True)
class RunOutcome:
    """What one ``hpsearch run`` did.

    Attributes:
        results: the study's results (all runs so far, this one included).
        mlflow_parent_run_id: this run's MLflow parent run; ``None`` when there was nothing to do.
        finished: trials this run finished (complete, pruned or failed).
        interrupted: trials stopped by an interruption (enqueued to run again).
        elapsed_s: how long the search ran on the runner's clock (simulated seconds
            under the simulated runner).
        timed_out: ``study.timeout`` ended the search.
        overdue: trials still running at ``study.timeout`` plus its grace were stopped
            (they are among ``interrupted``).
        mlflow_experiment_id: the MLflow experiment the runs are in.
        short_of: finished trials the study still lacks of ``study.n_trials`` (0: reached).
    """

    results: StudyResults
    mlflow_parent_run_id: str | None
    finished: int
    interrupted: int
    elapsed_s: float = 0.0
    timed_out: bool = False
    overdue: bool = False
    short_of: int = 0
    mlflow_experiment_id: str | None = None


@dataclass(frozen=True)
class Afresh:
    """What a run may start afresh, where it would otherwise refuse to leave records behind.

    Attributes:
        mlflow_history: a new MLflow store, the study's runs' one gone (``--new-mlflow-history``).
        study: a new study beside the MLflow runs of an earlier one's trials (``--new-study``).
    """

    mlflow_history: bool = False
    study: bool = False


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
    with _quiet_libraries():
        try:
            afresh = Afresh(mlflow_history=new_mlflow_history, study=new_study)
            outcome = _run(config, policy, console or Console(), runner, afresh, tracker)
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
    policy: ResourcePolicy | None,
    console: Console,
    runner: TrialRunner,
    afresh: Afresh,
    tracker: Tracker | None = None,
) -> RunOutcome:
    workdir = os.getcwd()
    ensure_importable_from(workdir)
    # Fail here, with a one-line error, rather than in every trial worker.
    check_train(
        config.train_target,
        config.command,
        config.source,
        objective=config.optuna_objective,
        trainable=config.tune_trainable,
    )
    if config.fusion.mode != "off":
        check_fusion(config.fusion.train, config.fusion.shared, config.space, config.source)
    runner.check(config)
    telemetry = open_backend(config.telemetry)  # opening a backend is the root's job
    try:
        return _search(config, policy, console, runner, telemetry, workdir, afresh, tracker)
    finally:
        if telemetry.backend is not None:
            telemetry.backend.close()


def _search(  # noqa: PLR0917 - the root hands over what it opened
    config: RunConfig,
    policy: ResourcePolicy | None,
    console: Console,
    runner: TrialRunner,
    telemetry: OpenedTelemetry,
    workdir: str,
    afresh: Afresh,
    tracker: Tracker | None = None,
) -> RunOutcome:
    execution = _execution_for(config, telemetry.backend)
    handle = open_study(config, as_driver=True)
    for note in handle.notes:
        console.print(note, highlight=False, markup=False)
    if tracker is None:
        tracker = _checked_tracker(config, handle, console, afresh)
    reclaim_stale_trials(handle, tracker)
    recorded = record_unwritten_runs(handle, tracker)
    if recorded:
        console.print(
            f"{recorded} MLflow run(s) recorded from the study: their trials ended while "
            "the tracking server was out of reach and their search stopped",
            highlight=False,
            markup=False,
        )
    before = count_budget(handle.study.get_trials(deepcopy=False))
    budget = TrialBudget(config.study.n_trials, config.study.timeout)
    if budget.decide(before) is BudgetDecision.FINISHED and before.running == 0:
        console.print(
            f"study '{handle.name}' already has {before.finished} finished trials "
            f"(study.n_trials is {config.study.n_trials}): nothing to do; "
            "raise study.n_trials or pass --n-trials to run more"
        )
        return RunOutcome(StudyResults(handle.study), None, 0, 0)

    parent = ParentRun.start(config, handle, tracker)
    line = (
        telemetry.line if telemetry.backend is not None else f"{telemetry.line}; trials run on CPU"
    )
    console.print(line, highlight=False, markup=False)
    status, interrupted, elapsed, finished = RunStatus.FAILED, 0, 0.0, 0
    timed_out = overdue = False
    try:
        with (
            runner.connect(execution, workdir, _simulated(config)) as session,
            _mps(config, telemetry.backend, session, parent, console) as mps,
            _monitoring(config, telemetry.backend, session, console) as readings,
            _study_access(config, handle, session) as study_access,
            StoreWatch(Stores(config.source, config.study.storage, config.tracking.uri)),
        ):
            parts = build_search(
                config,
                handle=handle,
                parent=parent,
                session=session,
                readings=readings,
                telemetry=telemetry,
                console=console,
                policy=policy,
                before=before,
                mps=mps,
                study_access=study_access,
            )
            # Where a SIGTERM stopped the runner's processes too, what Ctrl-C records
            # is recorded without them (the runner then exits 143).
            session.on_lost(lambda: _close_without_runner(parts, parent, readings, handle))
            started = session.clock()
            try:
                with parts.view:
                    session.run(
                        parts.scheduler,
                        parts.ledger,
                        name=parent.name,
                        max_pending=parts.max_pending,
                    )
            finally:
                elapsed = session.clock() - started
                # However the search ended, while the runner still runs: record every
                # trial still open, so nothing already run is lost.
                interrupted = close_out(
                    parts, parent, readings, handle, _stop_reason(config, parts)
                )
                finished = parts.ledger.finished
                timed_out = parts.budget is not None and parts.budget.timed_out()
                overdue = parts.budget is not None and parts.budget.overdue()
        status = RunStatus.KILLED if interrupted else RunStatus.FINISHED
    except KeyboardInterrupt:
        status = RunStatus.KILLED
        raise
    finally:
        parent.end(status)
        _land_tracking_writes(config, tracker, console)
        for store in (config.study.storage, config.tracking.uri):
            settle(store)

    trials = handle.study.get_trials(deepcopy=False)
    checkpoints = study_folder(config.execution.checkpoint_dir, config.study.name)
    sweep_checkpoints(handle.study, checkpoints, trials)
    after = count_budget(trials)
    # What this driver finished itself (another driver may share the study).
    return RunOutcome(
        StudyResults(handle.study),
        parent.run_id,
        finished,
        interrupted,
        elapsed,
        timed_out=timed_out,
        overdue=overdue,
        short_of=budget.short_of(after),
        mlflow_experiment_id=tracker.experiment_id,
    )


def _checked_tracker(
    config: RunConfig, handle: StudyHandle, console: Console, afresh: Afresh
) -> Tracker:
    """MLflow, as ``tracking`` says, once its store and the study's are known to agree (or
    ``afresh`` lets one start anew beside the other's records)."""
    if config.tracking.server:
        use_quick_http_settings()  # a server out of reach is known in seconds
    if not afresh.mlflow_history:
        _check_mlflow_store(config, handle)
    tracker = _tracker(config, console)
    if not afresh.study:
        _check_study_store(config, handle, tracker)
    return tracker


def _tracker(config: RunConfig, console: Console) -> Tracker:
    """MLflow, as ``tracking`` says; a server's writes kept through an outage."""
    tracker = MlflowTracker(
        config.tracking.uri, config.experiment_name, config.tracking.new_experiment_artifacts
    )
    if not config.tracking.server:
        return tracker
    return OutageTracker(
        tracker, tracker.uri, lambda line: console.print(line, highlight=False, markup=False)
    )


LAST_TRY_S = 3.0
"""How long a stopped search tries its kept tracking writes once more before it exits."""


def _land_tracking_writes(config: RunConfig, tracker: Tracker, console: Console) -> None:
    """At the search's end, the writes its tracking server's outage kept: landed, or said.

    An ended search waits for the server up to ``tracking.outage_limit``; one that was
    stopped (Ctrl-C, the limit) tries for a few seconds. What is left unwritten is
    said; the runs it leaves RUNNING are ended KILLED by the next ``hpsearch run``.
    """
    if not isinstance(tracker, OutageTracker):
        return
    down = tracker.down_for()
    if down is None:
        return
    limit = config.tracking.outage_limit
    stopped = interrupts.interrupted() or interrupts.stopped_for() is not None
    if not tracker.drain(LAST_TRY_S if stopped else max(LAST_TRY_S, limit - down)):
        return
    left = tracker.give_up()
    console.print(
        f"{left} MLflow write(s) of this search could not be written (the tracking server "
        f"{tracker.uri} is out of reach); the trials are in the study, and the next "
        "hpsearch run records their runs from it",
        highlight=False,
        markup=False,
    )
    if not stopped:
        interrupts.stop_for(
            outage_line(config.source, tracker.uri, tracker.down_for() or down, limit),
            signal_now=False,
        )


def _stop_reason(config: RunConfig, parts: SearchParts) -> str | None:
    """Why the trials still open when the search stopped were interrupted (``None``: it stopped)."""
    study = config.study
    if parts.budget is None or not parts.budget.overdue():
        return None
    return (
        f"stopped: still running {study.timeout_grace:g} s (study.timeout_grace) after "
        f"study.timeout ({study.timeout:g} s); it runs again on the next hpsearch run"
    )


@contextmanager
def _study_access(
    config: RunConfig, handle: StudyHandle, session: RunnerSession
) -> Iterator[StudyAccess | None]:
    """For an Optuna objective: the study served to the workers while the search runs."""
    if config.optuna_objective is None:
        yield None
        return
    from hpsearch.trial.optuna_objective import pickled_sampler

    with serve_study(handle.study, session.driver_address()) as address:
        yield StudyAccess(
            address=address, study=handle.name, sampler=pickled_sampler(handle.study.sampler)
        )


def build_search(
    config: RunConfig,
    *,
    handle: StudyHandle,
    parent: ParentRun,
    session: RunnerSession,
    readings: ClusterReadings | None,
    telemetry: OpenedTelemetry,
    console: Console,
    policy: ResourcePolicy | None = None,
    before: BudgetCount | None = None,
    mps: MpsDaemons | None = None,
    study_access: StudyAccess | None = None,
) -> SearchParts:
    """Wire the parts of a search: the ledger, its listeners, the policy and the scheduler.

    Pure wiring: nothing runs and nothing is started (the runner's session is
    asked for its clock, its resources and a verdict board).
    """
    objectives = config.objective_list
    earlier = handle.study.get_trials(deepcopy=False)  # read once for every part below
    judge = make_judge(config.study.pruner, objectives, handle.study, config.source)
    board = session.verdict_board() if judge is not None else None
    view = ProgressView(
        handle.name,
        objectives,
        n_trials=config.study.n_trials,
        already=before or BudgetCount(0, 0),
        best_before=_best_so_far(handle.study),
        console=console,
        clock=session.clock,
    )
    placing = None
    if policy is None:
        policy, placing = _resource_policy(config, session, readings, [view, parent], mps)
    gpu_memory_mb = _gpu_memory_mb(telemetry.backend)
    oom = OomHandling(OomBook(config.oom, earlier, gpu_memory_mb), handle, earlier)
    running = RunningTrials(
        config.oom.grows_memory,
        earlier,
        feedback=placing,
        clock=session.clock,
    )
    worker_dir = str(session.scratch) if session.scratch is not None else ""
    mirror = MlflowMirror(
        parent.tracker, handle.name, parent.run_id, objectives, logs_dir=worker_dir
    )
    # The order listeners are told in: the mirror's run exists before GPU series use it.
    listeners: list[TrialListener] = [mirror, oom, running]
    pace: PacePublisher | None = None
    if readings is not None:
        if telemetry.load_sink is not None and session.scratch is not None:
            # Workers play simulated trials in real time: they read their pace here.
            pace = PacePublisher(
                telemetry.load_sink, session.scratch / PACE_FILE, cores=session.capacity().cpus
            )
        load_sink = pace or telemetry.load_sink
        sharing = telemetry.sharing
        gpu = ClusterGpuMetrics(readings, local_sink=load_sink, sharing=sharing)
        listeners.append(GpuSeries(gpu, parent.tracker, mirror, session.clock))
    if board is not None:
        listeners.append(VerdictPoster(board))
    listeners += [CheckpointKeeper(), parent, view]
    if isinstance(parent.tracker, OutageTracker):
        tracking = config.tracking
        listeners.append(
            OutageLimit(
                parent.tracker.down_for, tracking.outage_limit, parent.tracker.uri, config.source
            )
        )
    settings = TrialSettings(
        train=config.train_target or config.optuna_objective or config.tune_trainable or "",
        command=config.command,
        source=config.source,
        objectives=tuple(o.metric for o in objectives),
        oom=config.oom,
        timeout_s=config.execution.trial_timeout,
        decision_board=board.name if board is not None else "",
        pace_file=str(pace.path) if pace is not None else "",
        worker_dir=worker_dir,
        workdir=os.getcwd(),
        gpu_memory_mb=gpu_memory_mb,
        fused_train=config.fusion.train if config.fusion.mode != "off" else "",
        study_access=study_access,
        tune_trainable=config.tune_trainable is not None,
    )
    fusion = None
    if config.fusion.mode != "off":
        shared = check_fusion(
            config.fusion.train, config.fusion.shared, config.space, config.source
        )
        auto = config.fusion.mode == "auto"
        most = config.fusion.max_members if auto else config.fusion.members
        fusion = FusionPlan(shared, FusionSizer(most, grow=auto, clock=session.clock))
    launches = Launches(
        settings,
        study=config.study.name,
        seed=config.study.sampler.seed,
        checkpoints=config.execution.checkpoint_dir,
        trials=config.execution.trials_dir,
        fusion=fusion,
    )
    ledger = TrialLedger(
        handle,
        space=config.search_space,
        objectives=ObjectiveValues(objectives, config.source),
        launches=launches,
        judge=judge,
        listeners=listeners,
        clock=session.clock,
    )
    study = config.study
    budget = TrialBudget(
        study.n_trials, study.timeout, clock=session.clock, grace_s=study.timeout_grace
    )
    scheduler = Scheduler(
        ledger,
        running=running,
        policy=policy,
        budget=budget,
        capacity=session.capacity,
        runs_alone=oom.next_runs_alone,
        clock=session.clock,
    )
    execution = config.execution
    max_pending = execution.max_concurrent or max(
        1, math.floor(session.capacity().cpus / execution.cpus_per_trial)
    )
    return SearchParts(
        ledger, scheduler, running, view, max_pending, board, placing, budget, fusion
    )


PACE_FILE = "simulated-gpu-pace.json"
"""Where, in the runner's scratch folder, simulated GPUs publish the trials' pace."""


def _check_study_store(config: RunConfig, handle: StudyHandle, tracker: Tracker) -> None:
    """Refuse to start a study afresh silently beside the MLflow runs of its earlier trials
    (its store's file deleted or replaced: those trials' results are gone with it)."""
    if handle.study.get_trials(deepcopy=False):
        return
    try:
        earlier = tracker.runs_of_trial(handle.name, 0)
    except Exception:  # a tracking server out of reach: the outage machinery says so
        return
    if earlier:
        raise ConfigError(
            config.source,
            "study.storage",
            f"study '{handle.name}' has no trials in {config.study.storage}, but the MLflow "
            f"store {config.tracking.uri} holds runs of its trials from an earlier search "
            "(the study's file deleted or replaced?)",
            "restore the study's file, or run again with --new-study to start the study "
            "afresh beside those runs",
        )


def _check_mlflow_store(config: RunConfig, handle: StudyHandle) -> None:
    """Refuse to start a new MLflow store silently under a study whose runs were in the old one."""
    uri = config.tracking.uri
    if not uri.startswith("sqlite:///") or Path(uri.removeprefix("sqlite:///")).exists():
        return
    recorded = sum(
        attrs.MLFLOW_RUN in t.user_attrs for t in handle.study.get_trials(deepcopy=False)
    )
    if recorded:
        raise ConfigError(
            config.source,
            "tracking.uri",
            f"the MLflow store {uri} is gone, but study '{handle.name}' has {recorded} "
            "trial(s) recorded in it",
            "restore the file, or run again with --new-mlflow-history to go on with a new "
            "MLflow history (the old trials' run ids will point nowhere)",
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
    if parts.placing is not None or parts.fusion is not None:
        parent.record_packing(
            parts.placing.decisions if parts.placing is not None else [],
            parts.fusion.sizer.decisions if parts.fusion is not None else [],
            parts.placing.policy.settings.mode if parts.placing is not None else None,
        )
    parent.record_analysis(StudyResults(handle.study))
    return interrupted


def _resource_policy(
    config: RunConfig,
    session: RunnerSession,
    readings: ClusterReadings | None,
    observers: list[PackingObserver],
    mps: MpsDaemons | None = None,
) -> tuple[ResourcePolicy, PackingAdmission | None]:
    """The policy a config asks for: CPU-only trials, or GPUs packed per ``packing``; the
    GPUs of the driver's machine that come to hold several trials get MPS (``mps``)."""
    execution = config.execution
    packing = config.packing_in_effect
    if packing is None or session.capacity().gpus <= 0:
        cpu_only = StaticPolicy(
            cpus_per_trial=execution.cpus_per_trial,
            trials_per_gpu=0,
            max_concurrent=execution.max_concurrent,
        )
        return cpu_only, None
    most = {"off": 1, "fixed": packing.trials_per_gpu, "auto": packing.max_trials_per_gpu}
    placing = PackingAdmission(
        PackingPolicy(packing),
        nodes=lambda: session.gpu_nodes(readings.monitored() if readings is not None else {}),
        request=AdmissionRequest(
            cpus_per_trial=execution.cpus_per_trial,
            max_concurrent=execution.max_concurrent,
            ray_gpus=1.0 / most[packing.mode],
        ),
        readings=readings,
        observers=observers,
        shared=_mps_for(mps, session.local_node_id),
        clock=session.clock,
    )
    return placing, placing


def _mps_for(mps: MpsDaemons | None, local: str | None) -> Callable[[GpuKey], None] | None:
    """What starts MPS for a shared GPU of the driver's machine (``None``: nothing does)."""
    if mps is None:
        return None

    def shared(gpu: GpuKey) -> None:
        if gpu.node == local:
            mps.shared(gpu.index)

    return shared


@contextmanager
def _mps(
    config: RunConfig,
    backend: TelemetryBackend | None,
    session: RunnerSession,
    parent: ParentRun,
    console: Console,
) -> Iterator[MpsDaemons]:
    """MPS for the GPUs the search shares, where ``packing.mps`` allows it; the parent run says
    what happened, per GPU."""
    packing = config.packing_in_effect
    daemons = MpsDaemons(
        packing.mps if packing is not None else "off",
        folder=session.scratch or Path(tempfile.gettempdir()),
        real_gpus=backend is not None and not backend.simulated,
        cluster=bool(config.execution.address),
        say=lambda line: console.print(line, highlight=False, markup=False),
    )
    try:
        yield daemons
    finally:
        daemons.close()
        parent.set_tags({"hpsearch.mps": daemons.detail()})


@contextmanager
def _monitoring(
    config: RunConfig,
    backend: TelemetryBackend | None,
    session: RunnerSession,
    console: Console,
) -> Iterator[ClusterReadings | None]:
    """The GPU monitors of the search, sampling while it runs (none without GPU telemetry).

    The driver's node is read by a monitor here, on the runner's clock; every other
    node with GPUs by a monitor of its own, when the runner has other nodes (a
    driver without a GPU of its own may still read a cluster's).
    """
    telemetry = config.telemetry
    if telemetry.backend == "off" or (backend is None and not config.execution.address):
        yield None
        return
    monitor = (
        GpuMonitor(
            backend,
            interval_s=telemetry.interval_s,
            window_s=telemetry.window_s,
            clock=session.clock,
        )
        if backend is not None
        else None
    )
    readings = ClusterReadings(session.local_node_id, monitor)

    def say(line: str) -> None:
        console.print(line, highlight=False, markup=False)

    with (
        session.sampling(monitor) if monitor is not None else nullcontext(),
        session.node_monitors(telemetry, readings, say),
    ):
        yield readings


# Loggers that narrate what the progress view already shows, or warn about
# files hpsearch tells Tune not to write (it keeps results in Optuna and MLflow).
_QUIET = {
    "optuna": logging.WARNING,
    "mlflow": logging.WARNING,
    "alembic": logging.WARNING,
    "ray.tune.analysis.experiment_analysis": logging.ERROR,
    # On Ctrl-C Tune advises Tuner.restore; with hpsearch, running again resumes.
    "ray.tune.tune": logging.ERROR,
    "ray._private.authentication.authentication_token_setup": logging.ERROR,
    # It logs each database error with its traceback, then raises it: a full disk
    # or a locked store reaches the user once, as one line (hpsearch.storage_faults).
    "mlflow.store.db.utils": logging.CRITICAL,
    # Tune's copy of its experiment state, which hpsearch does not use (the Optuna
    # study is the checkpoint): failing to write it is no news to the user.
    "ray.tune.execution.experiment_state": logging.CRITICAL,
}


@contextmanager
def _quiet_libraries() -> Iterator[None]:
    loggers = {name: logging.getLogger(name) for name in _QUIET}
    previous = {name: logger.level for name, logger in loggers.items()}
    for name, logger in loggers.items():
        logger.setLevel(_QUIET[name])
    # MLflow prints "View run ... at: URL" for every run it ends on a tracking server;
    # the search prints the runs table's address once.
    printing = os.environ.get(_MLFLOW_URL_PRINTING)
    os.environ[_MLFLOW_URL_PRINTING] = "true"
    tune_loggers = [logging.getLogger(name) for name in _TRIAL_FAILURE_LOGGERS]
    for logger in tune_loggers:
        logger.addFilter(_drop_trial_failures)
    try:
        yield
    finally:
        for logger in tune_loggers:
            logger.removeFilter(_drop_trial_failures)
        for name, logger in loggers.items():
            logger.setLevel(previous[name])
        if printing is None:
            os.environ.pop(_MLFLOW_URL_PRINTING, None)
        else:
            os.environ[_MLFLOW_URL_PRINTING] = printing


_MLFLOW_URL_PRINTING = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"


_TRIAL_FAILURE_LOGGERS = ("ray.tune.execution.tune_controller", "ray.tune.tune")


def _drop_trial_failures(record: logging.LogRecord) -> bool:
    """Tune's "Trial task failed" with Ray's traceback (two dozen lines per dead worker)
    and its closing "Trials did not complete": each trial's record has the cause, and
    its line in the progress view says it."""
    return not record.getMessage().startswith(("Trial task failed", "Trials did not complete"))


def _execution_for(config: RunConfig, backend: TelemetryBackend | None) -> ExecutionSpec:
    """The execution section, with one logical Ray GPU per simulated GPU on a local Ray."""
    execution = config.execution
    if backend is None or not backend.simulated or execution.address:
        return execution
    simulated = len(backend.gpus())
    if execution.num_gpus is None:
        return execution.model_copy(update={"num_gpus": simulated})
    if execution.num_gpus != simulated:
        raise HpsearchError(
            f"{config.source}: execution.num_gpus is {execution.num_gpus} but {simulated} "
            "GPU(s) are simulated; leave num_gpus out (the local Ray then gets one logical GPU "
            "per simulated GPU) or simulate as many GPUs as Ray has"
        )
    return execution


def _simulated(config: RunConfig) -> SimulatedSpec | None:
    """The simulated GPUs the search runs on, if any."""
    telemetry = config.telemetry
    return telemetry.simulation if telemetry.backend == "simulated" else None


def _gpu_memory_mb(backend: TelemetryBackend | None) -> float | None:
    """The smallest GPU's memory, to turn a GPU share into a memory cap (``None``: unknown)."""
    if backend is None:
        return None
    sizes = [g.memory_total_mb for g in backend.gpus() if g.memory_total_mb]
    return min(sizes) if sizes else None


def _best_so_far(study: Any) -> tuple[int, float] | None:
    if len(study.directions) != 1:
        return None
    try:
        best = study.best_trial
    except ValueError:  # no complete trial yet
        return None
    return best.number, float(best.value)
