"""The object a training function receives: report metrics, ask whether to stop, find the device."""

from __future__ import annotations

import contextlib
import numbers
import shutil
import tempfile
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from optuna import TrialPruned

from hpsearch.telemetry import GpuLoad
from hpsearch.trial.checkpoints import Checkpoint, CheckpointFolder
from hpsearch.trial.protocol import KnobReport

__all__ = [
    "Checkpoint",
    "DeviceMemory",
    "LocalTrialContext",
    "ReportedStep",
    "TrialChannel",
    "TrialContext",
    "TrialIdentity",
    "TrialPruned",
    "as_metric_value",
]


PruneOracle = Callable[[int], bool]
MetricsSource = Callable[[], Mapping[str, float]]


class TrialChannel(Protocol):
    """Where a context sends what the training function tells it (the worker, or memory)."""

    def report(self, step: int, metrics: dict[str, float]) -> None:
        """One ``ctx.report``."""

    def gpu_load(self, load: GpuLoad) -> None:
        """One ``ctx.simulate_gpu_load``."""

    def knobs(self, knobs: KnobReport) -> None:
        """One ``ctx.record_knobs``."""


@dataclass(frozen=True)
class TrialIdentity:
    """Which trial a context serves.

    Attributes:
        number: the Optuna trial number.
        seed: the trial's seed (see :func:`hpsearch.trial.seeds.trial_seed`).
        checkpoint_dir: the folder of its checkpoints, shared with its re-runs
            (empty: a temporary folder, made when first asked for, removed with the context).
    """

    number: int
    seed: int = 0
    checkpoint_dir: str = ""


@dataclass(frozen=True)
class DeviceMemory:
    """The GPU memory a trial has.

    Attributes:
        total_mb: the memory of its GPU (``None``: no GPU, or unknown).
        cap_mb: its cap when it shares the GPU (``None``: the whole GPU, or unknown).
    """

    total_mb: float | None = None
    cap_mb: float | None = None


@dataclass(frozen=True)
class ReportedStep:
    """One ``ctx.report`` call, as kept by a local context."""

    step: int
    metrics: dict[str, float]


class TrialContext:
    """Handed to ``train(params, ctx)``; the trial's line back to the search.

    Typical use in a training loop::

        for epoch in range(params["epochs"]):
            ...
            ctx.report(epoch, val_accuracy=acc, samples_per_sec=rate)
            if ctx.should_prune():
                raise hpsearch.TrialPruned()

    Under ``hpsearch run`` the context is built by the trial worker. To run a
    training function by hand (a test, a debugger), use :meth:`local`.
    """

    def __init__(
        self,
        *,
        trial: TrialIdentity,
        device: str,
        channel: TrialChannel,
        prune_oracle: PruneOracle | None = None,
        resources: Mapping[str, float] | None = None,
        memory: DeviceMemory = DeviceMemory(),
        pace: Callable[[], float] | None = None,
    ) -> None:
        self._trial = trial
        self._checkpoints: CheckpointFolder | None = None
        self._pace = pace
        self._memory = memory
        self.declared_memory_mb: float | None = None
        self._channel = channel
        self._sources: list[MetricsSource] = []
        self._device = device
        self._prune_oracle = prune_oracle
        self._resources = dict(resources or {})
        self._last_step: int | None = None
        self._latest: dict[str, float] = {}
        self._stop_search = ""

    @classmethod
    def local(
        cls,
        trial_number: int = 0,
        device: str = "cpu",
        prune_at: int | None = None,
        memory_cap_mb: float | None = None,
        speed_share: float | None = None,
        *,
        seed: int = 0,
        checkpoint_dir: str = "",
        gpu_memory_mb: float | None = None,
    ) -> LocalTrialContext:
        """A context that keeps reports in memory, for running ``train`` without a search.

        Args:
            trial_number: the number the function sees.
            device: the device the function is told to use.
            prune_at: ``should_prune()`` turns true from this step on (to test pruning paths).
            memory_cap_mb: the memory cap the function is told it has.
            speed_share: what :meth:`simulated_speed_share` answers (a shared simulated GPU).
            seed: what :attr:`seed` answers.
            checkpoint_dir: where checkpoints go (empty: a temporary folder, removed
                with the context).
            gpu_memory_mb: the memory of the GPU the function is told it runs on.
        """
        return LocalTrialContext(
            trial=TrialIdentity(trial_number, seed, checkpoint_dir),
            device=device,
            prune_at=prune_at,
            memory=DeviceMemory(gpu_memory_mb, memory_cap_mb),
            pace=None if speed_share is None else (lambda: speed_share),
        )

    @property
    def trial_number(self) -> int:
        """The Optuna trial number: unique within the study, stable across resumed runs."""
        return self._trial.number

    @property
    def seed(self) -> int:
        """The trial's seed: the study's seed (``study.sampler.seed``) plus the trial number.

        Python's, NumPy's and torch's generators are seeded with it before
        ``train`` is called; a re-run of an interrupted trial, and ``hpsearch
        rerun``, get the same seed.
        """
        return self._trial.seed

    @property
    def checkpoint_dir(self) -> Path:
        """The trial's checkpoint folder (made on first use); its re-runs find it again."""
        folder = self._folder().path
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def save_checkpoint(self, obj_or_path: Any, step: int) -> Checkpoint:
        """Save a checkpoint of ``step``: an object (``torch.save``) or a file or folder (copied).

        Only the latest checkpoint is kept. A trial interrupted and run again
        finds it with :meth:`load_checkpoint` and resumes after ``step``. When
        the trial ends its checkpoints are removed, except the best trial's
        (``hpsearch best --json`` names its folder).
        """
        return self._folder().save(obj_or_path, step)

    def load_checkpoint(self) -> Checkpoint | None:
        """The latest checkpoint of this trial (saved by an earlier, interrupted run), if any.

        Typical use::

            start = 0
            if (saved := ctx.load_checkpoint()) is not None:
                state = saved.load()
                model.load_state_dict(state["model"])
                start = saved.step + 1
        """
        return self._folder().latest()

    def _folder(self) -> CheckpointFolder:
        if self._checkpoints is None:
            folder = self._trial.checkpoint_dir
            if not folder:
                # A context with no folder of its own (TrialContext.local): a temporary
                # one, removed with the context (or at exit).
                folder = tempfile.mkdtemp(prefix="hpsearch-ckpt-")
                weakref.finalize(self, shutil.rmtree, folder, True)
            self._checkpoints = CheckpointFolder(folder)
        return self._checkpoints

    @property
    def device(self) -> str:
        """Where to train: ``"cuda"`` when this trial has a GPU that torch sees, else ``"cpu"``."""
        return self._device

    @property
    def resources(self) -> dict[str, float]:
        """Resources Ray assigned to this trial, e.g. ``{"CPU": 1.0, "GPU": 0.5}``."""
        return dict(self._resources)

    @property
    def memory_cap_mb(self) -> float | None:
        """GPU memory this trial may use, in MiB, when it shares its GPU; ``None`` otherwise.

        On a real GPU hpsearch already holds the process to it
        (``torch.cuda.set_per_process_memory_fraction``); a simulated workload
        honours it itself.
        """
        return self._memory.cap_mb

    @property
    def gpu_memory_mb(self) -> float | None:
        """The memory of this trial's GPU, in MiB; ``None`` without a GPU or where unknown.

        On a CUDA device, CUDA's figure for it (its own, where the search's GPUs
        differ in size); elsewhere the search's telemetry's (a simulated GPU's
        declared size: what a simulated workload runs out of).
        """
        return self._memory.total_mb

    @property
    def last_step(self) -> int | None:
        """The step of the latest report, if any."""
        return self._last_step

    @property
    def latest_metrics(self) -> dict[str, float]:
        """The latest value of every metric reported so far."""
        return dict(self._latest)

    def report(
        self,
        step: int | Mapping[str, Any] | None = None,
        /,
        *given: Mapping[str, Any],
        **metrics: Any,
    ) -> None:
        """Report metrics for one step (an epoch, or a number of batches).

        ``ctx.report(epoch, loss=0.3, acc=0.9)``, or with the metrics as one dict,
        ``ctx.report(epoch, {"loss": 0.3, "acc@1": 0.9})`` (any name, ``acc@1`` too).
        The step may also come by name, after the dict as MLflow's ``log_metrics``
        and W&B's ``log`` take it: ``ctx.report({"loss": 0.3}, step=epoch)``, or
        ``ctx.report(step=epoch, loss=0.3)``.

        Args:
            step: a non-negative integer, increasing over the trial.
            *given: at most one dict of metric name to value, as ``**metrics``.
            **metrics: metric name to a real number (Python, NumPy or 0-d tensor).
                Figures from :meth:`add_metrics_source` (the throughput meter of
                ``hpsearch.torch.configure``) are added unless named here.

        Raises:
            TypeError, ValueError: a step or metric the search cannot record.
        """
        step, metrics = _given_metrics(step, given, metrics)
        values: dict[str, float] = {}
        for name, value in metrics.items():
            if not name:
                raise ValueError("ctx.report: a metric's name is empty; name it")
            values[name] = as_metric_value(name, value)
        for source in self._sources:
            for name, value in source().items():
                values.setdefault(name, as_metric_value(name, value))
        self._last_step = step
        self._latest.update(values)
        self._channel.report(step, values)

    def simulate_gpu_load(
        self,
        utilization_pct: float,
        memory_mb: float,
        *,
        sm_share: float = 1.0,
        cpus: float = 1.0,
    ) -> None:
        """Declare the load this trial would put on its GPU, for simulated GPUs.

        For workloads that model a GPU on machines without one: under
        ``telemetry.backend: simulated`` with ``source: load``, the trial's GPU
        reads this utilisation and memory (added to its co-tenants') until the
        trial ends, and its MLflow run gets the GPU series as on real hardware.
        Elsewhere the readings are not affected; where the trial's GPU is
        monitored, the declaration is kept in its GPU record. Call it again when
        the load changes.

        Args:
            utilization_pct: 0-100, the share of time the GPU would be busy.
            memory_mb: device memory the trial would hold, in MiB (its CUDA context included).
            sm_share: 0-1, the share of the GPU's SMs its kernels would occupy (what MPS
                can overlap with other trials' kernels).
            cpus: the CPUs the trial keeps busy (its loop and DataLoader workers): trials
                whose CPUs together exceed the node's are slowed in proportion.
        """
        if not 0 <= utilization_pct <= 100:
            raise ValueError(
                f"simulate_gpu_load: utilization_pct must be within 0-100, got {utilization_pct}"
            )
        if memory_mb < 0:
            raise ValueError(f"simulate_gpu_load: memory_mb must be >= 0, got {memory_mb}")
        if not 0 <= sm_share <= 1:
            raise ValueError(f"simulate_gpu_load: sm_share must be within 0-1, got {sm_share}")
        if cpus <= 0:
            raise ValueError(f"simulate_gpu_load: cpus must be > 0, got {cpus}")
        self.declared_memory_mb = float(memory_mb)
        load = GpuLoad(float(utilization_pct), float(memory_mb), float(sm_share), float(cpus))
        self._channel.gpu_load(load)

    def simulated_speed_share(self) -> float:
        """The share of its solo speed this trial's simulated GPU gives it now (0-1].

        For workloads that model a GPU: under ``telemetry.backend: simulated``
        with ``source: load``, trials that share a simulated GPU slow each other
        per its sharing model, and a workload that plays its steps in real time
        divides its work by this. 1.0 elsewhere (real GPUs slow trials themselves).
        """
        return 1.0 if self._pace is None else self._pace()

    def add_metrics_source(self, source: MetricsSource) -> None:
        """Add ``source()``'s figures to every later :meth:`report` (the user's names win)."""
        self._sources.append(source)

    def record_knobs(self, effective: Mapping[str, Any], notes: list[str]) -> None:
        """Record the throughput knobs in effect and why any differ from the parameters.

        Called by ``hpsearch.torch.configure``; the driver writes them to the trial's
        MLflow run (tags ``knob.<name>`` and ``hpsearch.knob_notes``) and Optuna
        trial (attr ``hpsearch.knobs``).
        """
        self._channel.knobs(KnobReport(dict(effective), tuple(str(n) for n in notes)))

    def stop_search(self, reason: str = "") -> None:
        """Ask the search to start no more trials, as Optuna's ``study.stop()`` does: this
        trial and those running finish, and the search ends with exit code 0. A later
        ``hpsearch run`` goes on with the study.

        Args:
            reason: why, said when the search ends (e.g. "accuracy 0.99 reached").
        """
        self._stop_search = reason or "ctx.stop_search()"

    @property
    def stop_asked(self) -> str:
        """Why the trial asked the search to stop (:meth:`stop_search`); empty: it did not."""
        return self._stop_search

    def should_prune(self) -> bool:
        """Whether the study's pruner says to stop this trial after the latest report.

        Always false when the config sets no pruner or nothing was reported yet.
        When true, end the trial with ``raise hpsearch.TrialPruned()``.
        """
        if self._prune_oracle is None or self._last_step is None:
            return False
        return self._prune_oracle(self._last_step)


class LocalTrialContext(TrialContext):
    """A :class:`TrialContext` that records reports in :attr:`history`.

    Declared simulated GPU loads go to :attr:`gpu_loads` as ``(utilization_pct, memory_mb)``;
    recorded knobs to :attr:`knobs` and :attr:`knob_notes`.
    """

    def __init__(
        self,
        *,
        trial: TrialIdentity,
        device: str,
        prune_at: int | None,
        memory: DeviceMemory = DeviceMemory(),
        pace: Callable[[], float] | None = None,
    ) -> None:
        self.history: list[ReportedStep] = []
        self.gpu_loads: list[tuple[float, float]] = []
        self.knobs: dict[str, Any] = {}
        self.knob_notes: list[str] = []
        super().__init__(
            trial=trial,
            device=device,
            channel=_Kept(self),
            prune_oracle=None if prune_at is None else (lambda step: step >= prune_at),
            memory=memory,
            pace=pace,
        )


class _Kept:
    """The channel of a :class:`LocalTrialContext`: everything stays on the context."""

    def __init__(self, context: LocalTrialContext) -> None:
        self._context = context

    def report(self, step: int, metrics: dict[str, float]) -> None:
        self._context.history.append(ReportedStep(step, metrics))

    def gpu_load(self, load: GpuLoad) -> None:
        self._context.gpu_loads.append((load.utilization_pct, load.memory_mb))

    def knobs(self, knobs: KnobReport) -> None:
        self._context.knobs = dict(knobs.effective)
        self._context.knob_notes = list(knobs.notes)


def as_metric_value(name: str, value: Any, where: str = "ctx.report") -> float:
    """``value`` as a float metric; raises TypeError for anything but a real number.

    Args:
        where: what gave the value, for the error (``ctx.report``, or what train returned).
    """
    item = getattr(value, "item", None)  # NumPy scalars and 0-d tensors
    if callable(item) and not isinstance(value, numbers.Real):
        with contextlib.suppress(TypeError, ValueError, RuntimeError):  # not a scalar
            value = item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{where}: metric {name!r} must be a real number, got {type(value).__name__}"
        )
    # NaN and inf are kept: they are facts about the trial; the driver judges an
    # objective that is not finite.
    return float(value)


def _given_metrics(
    step: object, given: tuple[Mapping[str, Any], ...], named: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """The step and metrics of one ``ctx.report(step, *given, **named)``, the step checked
    (given by name, ``step=``, it is in ``named``).

    Raises:
        TypeError, ValueError: a step or metrics given in a form ``report`` does not take.
    """
    if "step" in named and (step is None or (isinstance(step, Mapping) and not given)):
        # By name: ctx.report(step=epoch, loss=0.3), or MLflow's log_metrics(metrics,
        # step=epoch) and W&B's log(metrics, step=epoch) order.
        given = (step,) if isinstance(step, Mapping) else ()
        step = named.pop("step")
    if step is None:
        raise TypeError("ctx.report needs the step: ctx.report(epoch, loss=0.3)")
    if isinstance(step, Mapping):  # tune.report's habit: the metrics as one dict
        raise TypeError(
            "ctx.report takes the step first, then the metrics: "
            "ctx.report(epoch, loss=0.3), or ctx.report(epoch, metrics) for a dict"
        )
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
        # Optuna's trial.report(value, step) puts the value first.
        hint = " (Optuna's order is report(value, step))" if given or not named else ""
        raise ValueError(
            f"ctx.report: step must be a non-negative integer, got {step!r}; "
            f"write ctx.report(step, name=value){hint}"
        )
    if len(given) > 1 or any(not isinstance(one, Mapping) for one in given):
        raise TypeError(
            "ctx.report: after the step, give the metrics as one dict or by name: "
            f"ctx.report(epoch, {{'loss': 0.3}}) or ctx.report(epoch, loss=0.3); "
            f"got {', '.join(repr(one) for one in given)}"
        )
    metrics = {**(dict(given[0]) if given else {}), **named}
    if not metrics:
        raise ValueError("ctx.report: give at least one metric, e.g. ctx.report(epoch, loss=0.3)")
    return int(step), metrics
