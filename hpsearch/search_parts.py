"""A search's parts: wired from the config (:func:`build_search`), run on the runner's
session (:func:`run_parts`), and closed out however the search ends (:func:`close_out`).

The wiring half of the composition root (:mod:`hpsearch.api` is the entry, and
opens what the parts run beside: the runner's session, MPS, the GPU readings).
Pure wiring: each part builds itself from its own settings section; nothing
here reads a mode or starts anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console

from hpsearch.config import RunConfig
from hpsearch.gpu_telemetry import OpenedTelemetry
from hpsearch.lifecycle import (
    Beside,
    CheckedCode,
    FusionPlan,
    ObjectiveValues,
    OomHandling,
    ParentRun,
    RunningTrials,
    SearchEnd,
    TrialLedger,
    TrialListener,
    WorkerSide,
    launches_for,
    search_listeners,
)
from hpsearch.oom import OomBook
from hpsearch.placement import PackingAdmission, ResourcePolicy, resource_policy
from hpsearch.progress import ProgressView
from hpsearch.pruning import VerdictBoard, make_judge
from hpsearch.runner import MpsDaemons, RunnerSession, mps_starter
from hpsearch.scheduler import Scheduler
from hpsearch.simulation import PacePublisher
from hpsearch.study import BudgetCount, StudyHandle, TrialBudget
from hpsearch.telemetry import ClusterGpuMetrics, ClusterReadings
from hpsearch.tracking import RunStatus
from hpsearch.trial.other_tools import StudyAccess

__all__ = ["SearchParts", "build_search", "close_out", "run_parts"]


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
    sink = telemetry.load_sink if readings is not None else None
    pace = PacePublisher.in_scratch(sink, session.scratch, session.capacity().cpus)
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
    budget = TrialBudget.of_search(config, session.clock)
    beside = Beside(oom, running, view, gpu, board, side.worker_dir, tuple(listeners), budget.stop)
    launches = launches_for(config, code, side, session.clock, evidence=placing)
    ledger = TrialLedger(
        handle,
        space=config.search_space,
        objectives=ObjectiveValues(config.objective_list, config.source, config.how_to_report),
        launches=launches,
        judge=judge,
        listeners=search_listeners(config, handle.name, parent, beside, session.clock),
        clock=session.clock,
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
    max_pending = config.execution.max_pending(session.capacity().cpus)
    return SearchParts(
        ledger, scheduler, running, view, max_pending, board, placing, budget, launches.fusion
    )


def run_parts(
    parts: SearchParts, session: RunnerSession, parent: ParentRun, readings: ClusterReadings | None
) -> SearchEnd:
    """Run the wired parts on the runner's session until the search ends, then close them out."""
    # Where a SIGTERM stopped the runner's processes too, what Ctrl-C records
    # is recorded without them (the runner then exits 143).
    session.on_lost(lambda: _close_without_runner(parts, parent, readings))
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
        interrupted = close_out(parts, parent, readings, reason)
        timed_out = budget is not None and budget.timed_out()
        overdue = budget is not None and budget.overdue()
        stopped = budget.stopped if budget is not None else ""
    return SearchEnd(parts.ledger.finished, interrupted, elapsed, timed_out, overdue, stopped)


def _close_without_runner(
    parts: SearchParts, parent: ParentRun, readings: ClusterReadings | None
) -> None:
    """Ctrl-C's records of a search whose runner is gone: trials queued again, runs KILLED."""
    close_out(parts, parent, readings)
    parent.end(RunStatus.KILLED)


def close_out(
    parts: SearchParts,
    parent: ParentRun,
    readings: ClusterReadings | None,
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
    fusion = parts.fusion.sizer if parts.fusion is not None else None
    parent.record_end(monitor, parts.placing, fusion)
    return interrupted
