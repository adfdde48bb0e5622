"""Running one trial of the user's training function in a worker process, whatever runs it.

:func:`execute_trial` is the trial's whole life in the worker: the device and
its memory cap, the training function, out-of-memory caught and (with
``oom.action: retry_smaller_batch``) retried with a smaller batch, and the end
event the driver records. The runner supplies where the worker runs (an
:class:`~hpsearch.trial.protocol.Assignment`), where events go (a
:class:`WorkerChannel`) and how ``ctx.should_prune()`` is answered.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from hpsearch.adapters import answer_setup_mlflow, install_pickles, resolve_train_function
from hpsearch.oom import BatchRetry, OomReport, device_oom, retry_smaller
from hpsearch.simulation import PaceReader
from hpsearch.space import flat_names
from hpsearch.telemetry import NVIDIA_DRIVER, GpuLoad, cuda_device
from hpsearch.tracking import TrialOf, end_open_runs, logged_by_own_runs, trial_runs
from hpsearch.trial.context import (
    DeviceMemory,
    PruneOracle,
    TrialContext,
    TrialIdentity,
    TrialPruned,
    as_metric_value,
)
from hpsearch.trial.death import output_tail
from hpsearch.trial.protocol import (
    Assignment,
    EndReport,
    EventKind,
    KnobReport,
    MemberSpec,
    Outcome,
    TrialLaunch,
    TrialSettings,
    WorkerEvent,
)
from hpsearch.trial.seeds import seed_everything
from hpsearch.trial.text_metrics import TextMetrics, last_printed, naming_lines
from hpsearch.worker._exits import exit_failure
from hpsearch.worker._threads import with_thread_hint
from hpsearch.worker._trial_env import trial_environment

T = TypeVar("T")

logger = logging.getLogger(__name__)


WorkerChannel = Callable[[WorkerEvent], None]
"""Where a worker's events go (Ray Tune's ``tune.report`` in a search)."""


class Sender:
    """The context's channel in a worker: every call becomes one event; the first carries
    the assignment."""

    def __init__(
        self, send: WorkerChannel, assigned: Assignment, member: int | None = None
    ) -> None:
        self._send = send
        self._assigned: Assignment | None = assigned
        self._member = member

    def _emit(self, event: WorkerEvent) -> None:
        if self._assigned is not None:
            event = replace(event, assigned=self._assigned)
            self._assigned = None
        if self._member is not None:
            event = replace(event, member=self._member)
        self._send(event)

    def report(self, step: int, metrics: dict[str, float]) -> None:
        self._emit(WorkerEvent(kind=EventKind.REPORT, step=step, metrics=metrics))

    def gpu_load(self, load: GpuLoad) -> None:
        self._emit(WorkerEvent(kind=EventKind.GPU_LOAD, gpu_load=load))

    def knobs(self, knobs: KnobReport) -> None:
        self._emit(WorkerEvent(kind=EventKind.KNOBS, knobs=knobs))


def execute_trial(
    launch: TrialLaunch,
    *,
    assigned: Assignment,
    send: WorkerChannel,
    oracle: PruneOracle | None = None,
) -> WorkerEvent:
    """Run ``train(params, ctx)`` for the launch's trial; return its end event (not yet sent).

    Every exception of the training function is caught and becomes a failed
    trial with its traceback: the search goes on, and the driver records the
    error text. A trial that runs out of GPU memory ends PRUNED with
    ``end.oom``; with ``oom_action: retry_smaller_batch`` it is first run again
    with the batch halved and gradient accumulation doubled (``end.retries``).

    Args:
        launch: the trial and its settings, from the driver.
        assigned: where the worker runs (its GPU already chosen, see :func:`use_gpu`).
        send: where reports and declarations go while it runs.
        oracle: answers ``ctx.should_prune()`` for a step; ``None``: never prune.
    """
    channel = Sender(send, assigned)
    with surroundings(launch):
        outcome, error, final, end = _call_train(launch, assigned, channel, oracle)
        end_open_runs(outcome.run_status)
    return WorkerEvent(
        kind=EventKind.END,
        outcome=outcome,
        error="" if outcome is Outcome.PRUNED else error,
        metrics=final,
        assigned=assigned,
        end=replace(end, reason=error) if outcome is Outcome.PRUNED and error else end,
    )


@contextmanager
def surroundings(launch: TrialLaunch) -> Iterator[None]:
    """What the launch's code runs in, each put back as it was after: the working folder,
    its own folder in the environment (:mod:`hpsearch.worker._trial_env`), and where its
    MLflow calls go."""
    with folder_kept(), trial_environment(launch.members[0].trial_dir), own_mlflow_runs(launch):
        yield


@contextmanager
def folder_kept() -> Iterator[None]:
    """Leave the process in the folder it was in, whatever the trial's code did: a reused
    worker's next trial then starts where hpsearch ran, and opens the user's relative
    paths there (a trial's ``os.chdir`` made every later trial of its worker fail)."""
    folder = os.getcwd()
    try:
        yield
    finally:
        with contextlib.suppress(OSError):  # gone (the trial deleted it): nothing to go back to
            os.chdir(folder)


def own_mlflow_runs(launch: TrialLaunch) -> AbstractContextManager[None]:
    """Where the MLflow calls of the launch's code go while it runs: the search's store and
    experiment, in runs nested under its (first) trial's run."""
    tracking = launch.settings.tracking
    if tracking is None:
        return contextlib.nullcontext()
    answer_setup_mlflow()  # Ray's setup_mlflow, in any form of code, sets its run up there
    trial = TrialOf(tracking.experiment, tracking.study, launch.members[0].number)
    return trial_runs(tracking.uri, trial)


@dataclass(frozen=True)
class _Attempt:
    outcome: Outcome
    error: str = ""
    final: Mapping[str, float] | None = None
    oom: OomReport | None = None


def _call_train(
    launch: TrialLaunch,
    assigned: Assignment,
    channel: Sender,
    oracle: PruneOracle | None,
) -> tuple[Outcome, str, dict[str, float], EndReport]:
    """The training function's outcome, error text (or prune message), final metrics, end."""
    settings, trial = launch.settings, launch.trial
    try:
        train = _train_of(settings, trial)
        limit_torch_threads(launch.admission.cpus)
    except Exception:
        return Outcome.FAIL, traceback.format_exc(), {}, EndReport()
    # A script holds the GPU in its own process: this one must not start CUDA (a
    # context costs hundreds of MiB on the GPU); the script is told its cap instead.
    device = "cpu" if settings.command else device_of(assigned)
    cap_mb = apply_memory_cap(launch, device)
    resources = {k: v for k, v in (("CPU", assigned.cpus), ("GPU", assigned.gpus)) if v is not None}
    attempt = dict(trial.params)
    retries: list[BatchRetry] = []
    pace = PaceReader(settings.pace_file, trial.number).share if settings.pace_file else None
    while True:
        ctx = TrialContext(
            trial=TrialIdentity(trial.number, trial.seed, trial.checkpoint_dir),
            device=device,
            channel=channel,
            prune_oracle=oracle,
            resources=resources,
            memory=DeviceMemory(gpu_memory_of(device, assigned, settings.gpu_memory_mb), cap_mb),
            pace=pace,
        )
        result = _attempt(train, attempt, ctx, trial.seed, settings.objectives)
        if result.oom is None:
            final = dict(result.final or {})
            unread: tuple[tuple[str, str], ...] = ()
            if result.outcome is Outcome.COMPLETE:
                final.update(_printed_objectives(launch, final, ctx))
                final.update(_logged_objectives(settings, trial.number, final, ctx))
                unread = _unread_objectives(launch, final, ctx)
            end = EndReport(retries=tuple(retries), stop_search=ctx.stop_asked, unread=unread)
            return result.outcome, result.error, final, end
        # Out of the except block (whose traceback held the failed frames' tensors),
        # the memory can be given back before anything else runs in this process.
        oom = replace(result.oom, peak_mb=_release_memory(device, ctx), cap_mb=cap_mb)
        retry = retry_smaller(attempt, settings.oom, retries, oom.step)
        if retry is None:
            return Outcome.PRUNED, "", {}, EndReport(oom=oom, retries=tuple(retries))
        smaller, record = retry
        logger.warning(
            "trial %d: out of GPU memory at batch_size %s; retrying with %s",
            trial.number,
            record.batch_size,
            record.retry_batch_size,
        )
        retries.append(record)
        attempt = smaller


def _printed_objectives(
    launch: TrialLaunch, final: Mapping[str, float], ctx: TrialContext
) -> dict[str, float]:
    """The objectives a completed script reported nowhere but printed as text for people
    (``val_acc: 0.91``, Lightning's results table) on the stdout its trial captured, or
    logged on its stderr (Python's ``logging`` writes there): their last values, as
    ``metrics: {scalars: true}`` would read them (stdout's first)."""
    command = launch.settings.command
    if command is None or isinstance(command.metrics, TextMetrics):
        return {}  # reading text already, or no script
    return _found_in_output(
        launch, _unreported(launch.settings.objectives, final, ctx), last_printed
    )


def _unread_objectives(
    launch: TrialLaunch, final: Mapping[str, float], ctx: TrialContext
) -> tuple[tuple[str, str], ...]:
    """The objectives a completed script reported nowhere, each with the last line of its
    output (stdout's first) that names it with more than a number: what no rule read."""
    if launch.settings.command is None:
        return ()
    missing = _unreported(launch.settings.objectives, final, ctx)
    return tuple(_found_in_output(launch, missing, naming_lines).items())


def _found_in_output(
    launch: TrialLaunch, names: Sequence[str], find: Callable[[str, Sequence[str]], Mapping[str, T]]
) -> dict[str, T]:
    """What ``find`` finds of ``names`` in the output the trial captured: its stdout's,
    then its stderr's for the names stdout did not give."""
    found: dict[str, T] = {}
    for path in (launch.stdout_file, launch.stderr_file):
        still = [name for name in names if name not in found]
        if still and path and (text := output_tail(path)):
            found.update(find(text, still))
    return found


def _logged_objectives(
    settings: TrialSettings, number: int, final: Mapping[str, float], ctx: TrialContext
) -> dict[str, float]:
    """The objectives a completed trial reported nowhere but logged to MLflow itself, in
    its own runs (``mlflow.log_metric`` in code that already logs there): their last values."""
    missing = _unreported(settings.objectives, final, ctx)
    tracking = settings.tracking
    if not missing or tracking is None:
        return {}
    trial = TrialOf(tracking.experiment, tracking.study, number)
    return logged_by_own_runs(tracking.uri, trial, missing)


def _unreported(
    objectives: Sequence[str], final: Mapping[str, float], ctx: TrialContext
) -> list[str]:
    """The objectives neither a report nor the trial's final metrics gave."""
    return [name for name in objectives if name not in ctx.latest_metrics and name not in final]


def _train_of(settings: TrialSettings, trial: MemberSpec) -> Callable[..., Any]:
    """The trial's training function: the user's, or the runner of its training script, of
    its Optuna objective or of its Ray Tune trainable."""
    install_pickles(settings.by_value)  # a function a dict config sent by value
    if settings.study_access is not None:
        from hpsearch.adapters import objective_train

        objective = resolve_train_function(
            settings.train, source=settings.source, key="train.optuna", objective=True
        )
        return objective_train(objective, settings.study_access, settings.objectives)
    if settings.tune_trainable is not None:
        from hpsearch.adapters import tune_train

        tune = settings.tune_trainable
        return tune_train(
            resolve_train_function(
                settings.train, source=settings.source, key="train.tune", trainable=True
            ),
            stop=tune.stop,
            checkpoint_frequency=tune.checkpoint_frequency,
            trial_dir=trial.trial_dir,
        )
    if settings.command is None:
        return resolve_train_function(settings.train, source=settings.source)
    from hpsearch.adapters import command_train

    return command_train(settings.command, settings.workdir, trial.trial_dir)


def _attempt(
    train: Callable[..., Any],
    params: dict[str, Any],
    ctx: TrialContext,
    seed: int,
    objectives: Sequence[str],
) -> _Attempt:
    """One run of the training function.

    Only text leaves the ``except`` blocks: a live traceback keeps the failed
    frames (and their tensors) alive.
    """
    try:
        seed_everything(seed)
        try:
            returned = train(params, ctx)
        except SystemExit as exited:
            failure = exit_failure(exited, "train")
            if failure is not None:
                return _Attempt(Outcome.FAIL, failure)
            returned = None  # sys.exit(0): the function's end, what it reported kept
        final = final_metrics(returned, objectives)
    except TrialPruned as pruned:
        return _Attempt(Outcome.PRUNED, str(pruned))
    except Exception as exc:
        kind = device_oom(exc)
        if kind is None:
            return _Attempt(Outcome.FAIL, with_thread_hint(traceback.format_exc(), exc))
        message = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        return _Attempt(Outcome.PRUNED, oom=OomReport(kind, message, ctx.last_step))
    return _Attempt(Outcome.COMPLETE, final=final)


def apply_memory_cap(launch: TrialLaunch, device: str) -> float | None:
    """Hold a trial that shares a GPU to its share of the memory; return the cap in MiB.

    Set on every trial, whole GPU included: a reused worker keeps the previous
    trial's fraction otherwise. Without a real GPU, the driver's cap (from the
    simulated GPU's memory) is passed on for the workload to honour.
    """
    if device != "cuda":
        return launch.memory_cap_mb
    import torch

    share = launch.admission.gpus
    fraction = share if 0 < share < 1 else 1.0
    torch.cuda.set_per_process_memory_fraction(fraction)
    torch.cuda.reset_peak_memory_stats()
    if fraction >= 1.0:
        return None
    return fraction * torch.cuda.get_device_properties(0).total_memory / 2**20


def gpu_memory_of(device: str, assigned: Assignment, told: float | None) -> float | None:
    """The memory of the trial's GPU in MiB: CUDA's own where it runs on one (GPUs of several
    sizes: the driver tells the smallest), else what the driver tells (a simulated GPU's)."""
    if device == "cuda":
        import torch

        return float(torch.cuda.get_device_properties(0).total_memory) / 2**20
    return told if assigned.gpu_ids else None


def _release_memory(device: str, ctx: TrialContext) -> float | None:
    """Free what the failed attempt left; return its peak memory in MiB (``None`` if unknown)."""
    peak = release_memory(device)
    return peak if device == "cuda" else ctx.declared_memory_mb


def release_memory(device: str) -> float | None:
    """Free what a failed attempt left; its CUDA peak in MiB (``None`` off CUDA)."""
    gc.collect()
    if device != "cuda":
        return None
    import torch

    peak = torch.cuda.max_memory_allocated() / 2**20
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return float(peak)


def final_metrics(returned: Any, objectives: Sequence[str]) -> dict[str, float]:
    """Metrics from the training function's return value: none, a mapping, or one number.

    A mapping is read as Ray Tune reads a result: a nested dict's numbers are named
    ``outer/inner``, and what is not a number (a path, a list, a flag) is left out, except
    an objective, which must be one.
    """
    where = "what train returned"
    if returned is None:
        return {}
    if isinstance(returned, Mapping):
        metrics: dict[str, float] = {}
        for name, value in flat_names(returned, separator="/").items():
            try:
                metrics[name] = as_metric_value(name, value, where)
            except TypeError:
                if name in objectives:
                    raise
        return metrics
    if len(objectives) != 1:
        raise TypeError(
            f"train returned {type(returned).__name__} but the config has "
            f"{len(objectives)} objectives; return a dict of metrics instead"
        )
    if isinstance(returned, str | bytes | Sequence):
        raise TypeError(
            f"train returned a {type(returned).__name__}; return a number (the objective "
            f"{objectives[0]!r}), a dict of metrics, or None"
        )
    return {objectives[0]: as_metric_value(objectives[0], returned, where)}


def use_gpu(index: int, assigned: Assignment) -> Assignment:
    """Run on GPU ``index`` of this node (NVML's number), the one the packing policy chose.

    Ray fills its GPU 0 first; the policy spreads trials, so its choice replaces
    Ray's before CUDA starts in this process (``CUDA_VISIBLE_DEVICES``: the GPU's
    UUID where NVML answers, else its index). A reused worker keeps the GPU CUDA
    first saw, which is why a placed trial's Ray request names its GPU and Tune
    reuses workers only within one GPU.

    Returns:
        The assignment as it now is (unchanged when CUDA had already started elsewhere).
    """
    torch = sys.modules.get("torch")
    started = torch is not None and torch.cuda.is_initialized()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    # By its UUID where NVML answers: CUDA's own numbers may order GPUs otherwise than
    # NVML's, and under the GPU's MPS daemon its one GPU is the client's device 0.
    device = cuda_device(index)
    if started and visible != device:
        logger.warning(
            "CUDA already started on GPU(s) %s in this worker; the trial stays there, "
            "not on GPU %d",
            visible,
            index,
        )
        return assigned
    os.environ["CUDA_VISIBLE_DEVICES"] = device
    return replace(assigned, gpu_ids=(str(index),), ray_gpu_ids=assigned.gpu_ids)


AMD_DRIVER = Path("/dev/kfd")
"""Present where AMD's ROCm driver is loaded (Linux): a ROCm build of torch answers ``cuda``."""


def device_of(assigned: Assignment, drivers: tuple[Path, ...] = (NVIDIA_DRIVER, AMD_DRIVER)) -> str:
    """``cuda`` when the trial has a GPU torch can use (Ray sets CUDA_VISIBLE_DEVICES).

    A machine without a GPU driver (logical GPUs, as in CI and the simulated
    searches) answers ``cpu`` without importing torch: a second of a core in every
    new worker, for a trial that may never use it.
    """
    if not assigned.gpu_ids:
        return "cpu"
    linux = sys.platform.startswith("linux")
    if "torch" not in sys.modules and linux and not any(d.exists() for d in drivers):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def limit_torch_threads(cpus: float) -> None:
    """Keep torch's intra-op threads to the CPUs Ray reserved, so packed trials do not fight."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(max(1, math.floor(cpus)))
