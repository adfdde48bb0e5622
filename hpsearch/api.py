"""``hpsearch.run``: the composition root, the one place where the parts of a search are wired."""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from hpsearch.config import ExecutionSpec, RunConfig, load_config, parse_simulate
from hpsearch.entrypoint import ensure_importable_from, resolve_train_function
from hpsearch.errors import HpsearchError
from hpsearch.packing import GpuDecision, PackingPolicy, PackingSettings
from hpsearch.pruning import make_judge
from hpsearch.recorder import TrialRecorder, TrialTemplate, reclaim_stale_trials
from hpsearch.resources import ClusterCapacity, ResourcePolicy, StaticPolicy
from hpsearch.results import StudyResults
from hpsearch.study import BudgetDecision, TrialBudget, count_budget, open_study
from hpsearch.telemetry import (
    GpuMonitor,
    TelemetryBackend,
    TrialGpuMetrics,
    open_backend,
    render_report,
)
from hpsearch.tracking import STUDY_TAG, MlflowTracker, RunStatus

if TYPE_CHECKING:
    from hpsearch.progress import ProgressView
    from hpsearch.runner.placement import PackingAdmission

RAY_RESULTS_DIR = Path("mlruns") / "ray"
"""Where Ray Tune keeps trial folders (stdout/stderr of each trial), under the working directory."""


@dataclass(frozen=True)
class RunOutcome:
    """What one ``hpsearch run`` did.

    Attributes:
        results: the study's results (all runs so far, this one included).
        mlflow_parent_run_id: this run's MLflow parent run; ``None`` when there was nothing to do.
        finished: trials this run finished (complete, pruned or failed).
        interrupted: trials stopped by an interruption (enqueued to run again).
    """

    results: StudyResults
    mlflow_parent_run_id: str | None
    finished: int
    interrupted: int


def run(
    config: RunConfig | str | os.PathLike[str],
    *,
    address: str | None = None,
    n_trials: int | None = None,
    timeout: float | None = None,
    policy: ResourcePolicy | None = None,
    console: Console | None = None,
    simulate: str | None = None,
) -> RunOutcome:
    """Run (or continue) the search a config describes, until its budget is spent.

    Args:
        config: a config file path or a loaded :class:`RunConfig`.
        address: a Ray cluster to join (overrides ``execution.address``).
        n_trials: total trials the study should reach (overrides ``study.n_trials``).
        timeout: seconds after which no new trial starts (overrides ``study.timeout``).
        policy: the resource policy; default: a static policy from ``execution``.
        console: where the progress view draws.
        simulate: run against simulated GPUs (overrides ``telemetry``): a built-in
            trace name, a CSV trace, or ``load[:key=value,...]``/``constant[:...]``.

    Raises:
        HpsearchError: anything the user can fix (the CLI exits with code 2).
    """
    if not isinstance(config, RunConfig):
        config = load_config(config)
    simulated = None
    if simulate is not None:
        try:
            simulated = parse_simulate(simulate)
        except ValueError as exc:
            raise HpsearchError(f"--simulate: {exc}") from None
    config = config.with_overrides(
        n_trials=n_trials, timeout=timeout, address=address, simulate=simulated
    )
    console = console or Console()
    with _quiet_libraries():
        return _run(config, policy, console)


def _run(config: RunConfig, policy: ResourcePolicy | None, console: Console) -> RunOutcome:
    workdir = os.getcwd()
    ensure_importable_from(workdir)
    # Fail here, with a one-line error, rather than in every trial worker.
    resolve_train_function(config.train, source=config.source)
    backend, telemetry_line = open_backend(config.telemetry)
    try:
        return _search(
            config,
            policy,
            console,
            workdir=workdir,
            backend=backend,
            telemetry_line=telemetry_line,
        )
    finally:
        if backend is not None:
            backend.close()


def _search(
    config: RunConfig,
    policy: ResourcePolicy | None,
    console: Console,
    *,
    workdir: str,
    backend: TelemetryBackend | None,
    telemetry_line: str,
) -> RunOutcome:
    execution = _execution_for(config, backend)

    handle = open_study(config)
    tracker = MlflowTracker(
        config.tracking.uri, config.experiment_name, config.tracking.artifact_location
    )
    reclaim_stale_trials(handle, tracker)
    budget = TrialBudget(config.study.n_trials, config.study.timeout)
    before = count_budget(handle.study.get_trials(deepcopy=False))
    if budget.decide(before) is BudgetDecision.FINISHED and before.running == 0:
        console.print(
            f"study '{handle.name}' already has {before.finished} finished trials "
            f"(study.n_trials is {config.study.n_trials}): nothing to do; "
            "raise study.n_trials or pass --n-trials to run more"
        )
        return RunOutcome(StudyResults(handle.study), None, 0, 0)

    run_name, parent_run_id = _start_parent_run(config, handle.name, tracker)
    console.print(
        telemetry_line if backend is not None else f"{telemetry_line}; trials run on CPU",
        highlight=False,
        markup=False,
    )

    from hpsearch.progress import ProgressView
    from hpsearch.runner.cluster import current_capacity, local_node_id, ray_cluster

    status = RunStatus.FAILED
    finished_before = before.finished
    try:
        with (
            _mps(config, backend, tracker, parent_run_id),
            ray_cluster(execution, workdir) as capacity,
            _monitoring(config, backend) as monitor,
        ):
            from hpsearch.runner.adapters import AdmissionSearcher, RecorderCallback
            from hpsearch.runner.decision_board import DecisionBoardHandle
            from hpsearch.runner.tuner import run_trials

            gpu = (
                TrialGpuMetrics(monitor, local_node_id=local_node_id())
                if monitor is not None
                else None
            )
            judge = make_judge(
                config.study.pruner, config.objective_list, handle.study, config.source
            )
            board = DecisionBoardHandle() if judge is not None else None
            view = ProgressView(
                handle.name,
                config.objective_list,
                n_trials=config.study.n_trials,
                already=before,
                best_before=_best_so_far(handle.study),
                console=console,
            )
            placing: PackingAdmission | None = None
            if policy is None:
                policy, placing = _resource_policy(
                    config, execution, capacity, monitor, view, tracker, parent_run_id
                )
            recorder = TrialRecorder(
                handle,
                space=config.search_space,
                objectives=config.objective_list,
                tracker=tracker,
                parent_run_id=parent_run_id,
                template=TrialTemplate(
                    train=config.train,
                    source=config.source,
                    objectives=tuple(o.metric for o in config.objective_list),
                    decision_board=board.name if board else "",
                ),
                board=board,
                judge=judge,
                listeners=[view],
                gpu=gpu,
                oom=config.oom,
                gpu_memory_mb=_gpu_memory_mb(backend),
                oom_listener=placing,
            )
            searcher = AdmissionSearcher(recorder, policy, budget, current_capacity)
            max_pending = execution.max_concurrent or max(
                1, math.floor(capacity.cpus / execution.cpus_per_trial)
            )
            try:
                with view:
                    run_trials(
                        searcher,
                        RecorderCallback(recorder),
                        storage_path=RAY_RESULTS_DIR,
                        experiment=re.sub(r"[^\w.-]+", "_", run_name),
                        reuse_workers=execution.reuse_workers,
                        max_pending=max_pending,
                    )
            finally:
                # However the search ended, while Ray (and the decision board) still runs:
                # record every trial still open, so nothing already run is lost.
                interrupted = recorder.interrupt_open_trials()
                if board is not None:
                    board.close()
                if monitor is not None:
                    _record_gpu_report(tracker, parent_run_id, monitor)
                if placing is not None:
                    _record_packing(tracker, parent_run_id, placing)
                _record_pareto(tracker, parent_run_id, StudyResults(handle.study))
        status = RunStatus.KILLED if interrupted else RunStatus.FINISHED
    except KeyboardInterrupt:
        status = RunStatus.KILLED
        raise
    finally:
        tracker.end_run(parent_run_id, status)

    after = count_budget(handle.study.get_trials(deepcopy=False))
    return RunOutcome(
        StudyResults(handle.study), parent_run_id, after.finished - finished_before, interrupted
    )


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
}


@contextmanager
def _quiet_libraries() -> Iterator[None]:
    loggers = {name: logging.getLogger(name) for name in _QUIET}
    previous = {name: logger.level for name, logger in loggers.items()}
    for name, logger in loggers.items():
        logger.setLevel(_QUIET[name])
    try:
        yield
    finally:
        for name, logger in loggers.items():
            logger.setLevel(previous[name])


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


@contextmanager
def _mps(
    config: RunConfig, backend: TelemetryBackend | None, tracker: MlflowTracker, run_id: str
) -> Iterator[None]:
    """MPS for the search where ``packing.mps`` allows it; the parent run says what happened."""
    from hpsearch.runner.mps import mps_daemon

    packing = config.packing_in_effect
    with mps_daemon(
        packing.mps if packing is not None else "off",
        real_gpus=backend is not None and not backend.simulated,
        cluster=bool(config.execution.address),
    ) as state:
        tracker.set_tags(run_id, {"hpsearch.mps": state.detail})
        yield


@contextmanager
def _monitoring(config: RunConfig, backend: TelemetryBackend | None) -> Iterator[GpuMonitor | None]:
    """The GPU monitor, sampling in the background for the whole search (none without GPUs)."""
    if backend is None:
        yield None
        return
    telemetry = config.telemetry
    with GpuMonitor(
        backend, interval_s=telemetry.interval_s, window_s=telemetry.window_s
    ) as monitor:
        yield monitor


def _record_gpu_report(tracker: MlflowTracker, run_id: str, monitor: GpuMonitor) -> None:
    """The monitor's report and per-GPU summaries on the parent run."""
    monitor.stop()
    summaries = monitor.summaries(since=0.0)
    metrics: dict[str, float] = {"gpu_monitor_cpu_share_pct": 0.0}
    if monitor.wall_s:
        metrics["gpu_monitor_cpu_share_pct"] = 100 * monitor.sampler_cpu_s / monitor.wall_s
    for summary in summaries:
        if summary.utilization is not None:
            metrics[f"gpu{summary.index}_utilization_mean_pct"] = summary.utilization.mean
        if summary.memory_used is not None:
            metrics[f"gpu{summary.index}_memory_peak_mb"] = summary.memory_used.max
    tracker.log_metrics(run_id, metrics, 0)
    report = render_report(
        summaries,
        source=monitor.backend.describe(),
        interval_s=monitor.interval_s,
        sampler_cpu_s=monitor.sampler_cpu_s,
        wall_s=monitor.wall_s,
    )
    tracker.log_text(run_id, report, "gpu_report.txt")


def _resource_policy(  # noqa: PLR0917 - the composition root hands over what it built
    config: RunConfig,
    execution: ExecutionSpec,
    capacity: ClusterCapacity,
    monitor: GpuMonitor | None,
    view: ProgressView,
    tracker: MlflowTracker,
    run_id: str,
) -> tuple[ResourcePolicy, PackingAdmission | None]:
    """The policy a config asks for: CPU-only trials, or GPUs packed per ``packing``."""
    from hpsearch.runner.cluster import cluster_gpus, local_node_id
    from hpsearch.runner.placement import PackingAdmission

    packing = config.packing_in_effect
    if packing is None or capacity.gpus <= 0:
        cpu_only = StaticPolicy(
            cpus_per_trial=execution.cpus_per_trial,
            trials_per_gpu=0,
            max_concurrent=execution.max_concurrent,
        )
        return cpu_only, None
    settings = PackingSettings(**packing.model_dump(exclude={"mps"}))
    most = {"off": 1, "fixed": packing.trials_per_gpu, "auto": packing.max_trials_per_gpu}
    local = {g.index: g.memory_total_mb for g in monitor.gpus} if monitor is not None else None
    node = local_node_id()
    steps = itertools.count()

    def on_decision(gpu: str, decision: GpuDecision) -> None:
        view.packing_changed(gpu, decision.limit, decision.previous, decision.reason)

    def on_series(points: dict[str, float]) -> None:
        tracker.log_metrics(run_id, points, next(steps))

    placing = PackingAdmission(
        PackingPolicy(settings),
        nodes=lambda: cluster_gpus(local, node),
        cpus_per_trial=execution.cpus_per_trial,
        max_concurrent=execution.max_concurrent,
        ray_gpus=1.0 / most[packing.mode],
        monitor=monitor,
        on_decision=[on_decision],
        on_series=on_series,
    )
    return placing, placing


def _record_packing(tracker: MlflowTracker, run_id: str, placing: PackingAdmission) -> None:
    """Every packing decision of the search, with its reason, on the parent run."""
    tracker.log_text(run_id, json.dumps(placing.decisions, indent=2), "packing_decisions.json")
    tracker.set_tags(run_id, {"hpsearch.packing_mode": placing.policy.settings.mode})


def _gpu_memory_mb(backend: TelemetryBackend | None) -> float | None:
    """The smallest GPU's memory, to turn a GPU share into a memory cap (``None``: unknown)."""
    if backend is None:
        return None
    sizes = [g.memory_total_mb for g in backend.gpus() if g.memory_total_mb]
    return min(sizes) if sizes else None


def _record_pareto(tracker: MlflowTracker, run_id: str, results: StudyResults) -> None:
    """With several objectives: the Pareto plot and CSV on the parent run."""
    if not results.is_multi_objective:
        return
    import tempfile

    from hpsearch.pareto import write_pareto_files

    try:
        with tempfile.TemporaryDirectory() as folder:
            for path in write_pareto_files(results, Path(folder)):
                tracker.log_file(run_id, path, "pareto")
    except Exception as exc:
        # This runs while a search ends, maybe on an error of its own: a plot that
        # cannot be drawn must not hide that error or lose the records.
        logging.getLogger(__name__).warning("no Pareto plot on the parent run: %s", exc)


def _best_so_far(study: Any) -> tuple[int, float] | None:
    if len(study.directions) != 1:
        return None
    try:
        best = study.best_trial
    except ValueError:  # no complete trial yet
        return None
    return best.number, float(best.value)


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"study": {"name": "x"}}`` -> ``{"study.name": "x"}``, for MLflow params."""
    flat: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{name}."))
        elif value is not None:
            flat[name] = str(value)
    return flat


def _start_parent_run(config: RunConfig, study: str, tracker: MlflowTracker) -> tuple[str, str]:
    """The MLflow run of this search (its name and id), with the config's values and file."""
    run_name = f"{study}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_id = tracker.start_run(
        run_name,
        params=_flatten(config.model_dump(mode="json")),
        tags={STUDY_TAG: study, "hpsearch.config": config.source},
    )
    _attach_config(tracker, run_id, config)
    return run_name, run_id


def _attach_config(tracker: MlflowTracker, run_id: str, config: RunConfig) -> None:
    """Keep the config file with the parent run, so the run says what was searched."""
    source = Path(config.source)
    if source.is_file():
        tracker.log_text(run_id, source.read_text(encoding="utf-8"), f"config/{source.name}")
