"""Turn a trial's parameters into a configured training loop: loader, model, precision, steps."""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from hpsearch.torch._knobs import Device, Knobs, effective_knobs, knobs_from_params
from hpsearch.torch._meter import ThroughputMeter

if TYPE_CHECKING:
    from hpsearch.trial.context import TrialContext

logger = logging.getLogger("hpsearch.torch")

T = TypeVar("T")

_AUTOCAST_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16}


def configure(
    params: dict[str, Any],
    ctx: TrialContext | None = None,
    *,
    device: str | torch.device | None = None,
    warmup_steps: int | None = None,
) -> TrainingSetup:
    """Read the throughput knobs from ``params`` and set up this process for them.

    Typical use in a training function::

        setup = hpsearch.torch.configure(params, ctx)
        loader = setup.loader(train_set, shuffle=True)
        model = setup.prepare_model(build_model(params))
        optimizer = torch.optim.AdamW(model.parameters(), lr=params["lr"])
        for epoch in range(params["epochs"]):
            for inputs, targets in setup.batches(loader):
                setup.train_step(model, optimizer, loss_fn, inputs, targets)
            setup.flush(optimizer)
            ctx.report(epoch, val_accuracy=evaluate(model))   # + samples_per_sec, ...

    Every knob is set explicitly, on or off (a reused trial worker keeps the
    previous trial's global flags otherwise). A knob that cannot apply on the
    device is logged once and recorded as its effective value on the trial
    (MLflow tags ``knob.<name>`` and ``hpsearch.knob_notes``, Optuna attr
    ``hpsearch.knobs``). With a ``ctx``, the throughput meter's figures join every
    ``ctx.report`` (on a GPU, with ``gpu_seconds``: training time times the
    trial's GPU share, for objectives such as GPU-seconds to a target accuracy).

    Args:
        params: the trial's parameters; see :class:`~hpsearch.torch.Knobs` for the
            names read (others are ignored).
        ctx: the trial context (its device, and where figures are reported).
        device: overrides ``ctx.device`` (default ``cpu`` without a context).
        warmup_steps: steps left out of throughput figures (default 3, 10 with compile).

    Raises:
        ValueError: a knob value the toolkit cannot use.
    """
    target = torch.device(device if device is not None else (ctx.device if ctx else "cpu"))
    if target.type == "cuda" and target.index is None:
        target = torch.device("cuda", torch.cuda.current_device())
    requested = knobs_from_params(params)
    knobs, notes = effective_knobs(requested, probe_device(target))
    prefix = f"trial {ctx.trial_number}: " if ctx is not None else ""
    for note in notes:
        logger.warning("%sknob %s", prefix, note)
    _set_backend_flags(knobs)
    meter = ThroughputMeter(
        warmup_steps=warmup_steps if warmup_steps is not None else (10 if knobs.compile else 3),
        sync=(lambda: torch.cuda.synchronize(target)) if target.type == "cuda" else None,
        memory=_cuda_peaks(target) if target.type == "cuda" else None,
        gpu_share=_gpu_share(ctx) if target.type == "cuda" else None,
    )
    setup = TrainingSetup(
        knobs, requested=requested, notes=notes, device=target, meter=meter, ctx=ctx
    )
    if ctx is not None:
        ctx.add_metrics_source(meter.metrics)
        ctx.record_knobs(setup.effective(), notes)
    return setup


def probe_device(device: torch.device) -> Device:
    """What ``device`` supports, for :func:`~hpsearch.torch.effective_knobs`."""
    if device.type == "cuda":
        major, _ = torch.cuda.get_device_capability(device)
        return Device("cuda", bf16=torch.cuda.is_bf16_supported(), tf32=major >= 8)
    compiler = any(shutil.which(cc) for cc in ("g++", "c++", "clang++"))
    return Device(device.type, bf16=True, tf32=False, compiler=compiler)


class TrainingSetup:
    """The knobs in effect for one trial, and the pieces of a loop that honour them.

    Attributes:
        knobs: the effective knobs.
        requested: what the parameters asked for.
        notes: why effective differs from requested, one line per knob.
        device: where tensors go.
        meter: the trial's throughput meter.
    """

    def __init__(
        self,
        knobs: Knobs,
        *,
        requested: Knobs,
        notes: list[str],
        device: torch.device,
        meter: ThroughputMeter,
        ctx: TrialContext | None = None,
    ) -> None:
        self.knobs = knobs
        self._ctx = ctx
        self.requested = requested
        self.notes = list(notes)
        self.device = device
        self.meter = meter
        self._scaler = torch.amp.GradScaler(device.type) if knobs.precision == "fp16" else None
        self._micro_steps = 0
        self._window_samples = 0

    def effective(self) -> dict[str, Any]:
        """The effective knobs by name (what ran), for records."""
        return self.knobs.as_dict()

    # -- data -----------------------------------------------------------------

    def loader_kwargs(self) -> dict[str, Any]:
        """DataLoader arguments for the knobs: only those valid for the worker count."""
        knobs = self.knobs
        kwargs: dict[str, Any] = {
            "batch_size": knobs.batch_size,
            "num_workers": knobs.num_workers,
            "pin_memory": bool(knobs.pin_memory),
        }
        if knobs.num_workers > 0:
            kwargs["persistent_workers"] = knobs.persistent_workers
            if knobs.prefetch_factor is not None:
                kwargs["prefetch_factor"] = knobs.prefetch_factor
        return kwargs

    def loader(self, dataset: Dataset[Any], **kwargs: Any) -> DataLoader[Any]:
        """A DataLoader over ``dataset`` with the knobs' settings; ``kwargs`` add to them
        (``shuffle``, ``collate_fn``, ``generator``, ...)."""
        return DataLoader(dataset, **{**self.loader_kwargs(), **kwargs})

    def to_device(self, value: T) -> T:
        """``value`` (a tensor, or a tuple/list/dict of them) on the device.

        Copies are non-blocking where that helps, and 4-D float tensors go
        channels-last when that knob is on.
        """
        if isinstance(value, torch.Tensor):
            moved = value.to(self.device, non_blocking=bool(self.knobs.non_blocking))
            if self.knobs.channels_last and moved.dim() == 4 and moved.is_floating_point():
                moved = moved.contiguous(memory_format=torch.channels_last)
            return moved  # type: ignore[return-value]
        if isinstance(value, tuple | list):
            return type(value)(self.to_device(v) for v in value)
        if isinstance(value, dict):
            return {k: self.to_device(v) for k, v in value.items()}  # type: ignore[return-value]
        return value

    def batches(self, loader: Iterable[T]) -> Iterator[T]:
        """The loader's batches on the device, each step timed by the meter."""
        for batch in self.meter.iterate(loader):
            yield self.to_device(batch)

    # -- model ----------------------------------------------------------------

    def prepare_model(
        self, model: nn.Module, *, checkpointing: Callable[[nn.Module], None] | None = None
    ) -> nn.Module:
        """The model on the device, channels-last, checkpointed and compiled as the knobs say.

        Args:
            model: the model to train.
            checkpointing: turns gradient checkpointing on for this model (e.g.
                wraps blocks in :func:`checkpointed`); without it, a model's own
                ``gradient_checkpointing_enable()`` (Hugging Face) is used.
        """
        model = model.to(self.device)
        if self.knobs.channels_last:
            # nn.Module.to takes memory_format; torch's stubs leave it out.
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        if self.knobs.grad_checkpointing:
            own_hook = getattr(model, "gradient_checkpointing_enable", None)
            if checkpointing is not None:
                checkpointing(model)
            elif callable(own_hook):
                own_hook()
            else:
                self._downgrade(
                    "grad_checkpointing",
                    False,
                    "the model has no checkpointing hook; pass prepare_model(..., checkpointing=)",
                )
        if self.knobs.compile:
            compiled: nn.Module = torch.compile(model, mode=self.knobs.compile_mode)  # type: ignore[assignment]
            return compiled
        return model

    # -- steps ----------------------------------------------------------------

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The mixed-precision context for forward passes (a no-op in fp32)."""
        dtype = _AUTOCAST_DTYPE.get(self.knobs.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype)

    def backward(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer, samples: int) -> bool:
        """Accumulate the gradient of one micro-batch's mean ``loss``; step when the window is full.

        Each micro-batch's loss is weighted by its share of the effective batch, so
        ``grad_accum_steps`` micro-batches give the gradient of one batch of their
        combined size.

        Returns:
            Whether the optimizer stepped.
        """
        weight = samples / self.knobs.effective_batch_size
        scaled = loss * weight
        if self._scaler is not None:
            self._scaler.scale(scaled).backward()  # type: ignore[no-untyped-call]
        else:
            scaled.backward()  # type: ignore[no-untyped-call]
        self._micro_steps += 1
        self._window_samples += samples
        if self._micro_steps >= self.knobs.grad_accum_steps:
            self._step(optimizer)
            return True
        return False

    def flush(self, optimizer: torch.optim.Optimizer) -> bool:
        """Step on a partly filled accumulation window (call at the end of an epoch).

        The gradient is rescaled to the mean over the samples the window holds.

        Returns:
            Whether there was anything to step on.
        """
        if self._micro_steps == 0:
            return False
        self._step(optimizer)
        return True

    def train_step(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        inputs: torch.Tensor,
        targets: torch.Tensor,
    ) -> torch.Tensor:
        """Forward under autocast, loss, accumulate, and step when due; returns the loss."""
        with self.autocast():
            loss = loss_fn(model(inputs), targets)
        self.backward(loss, optimizer, samples=len(targets))
        return loss.detach()

    def _step(self, optimizer: torch.optim.Optimizer) -> None:
        full = self.knobs.effective_batch_size
        if self._scaler is not None:
            self._scaler.unscale_(optimizer)
        if self._window_samples != full:
            _scale_gradients(optimizer, full / self._window_samples)
        if self._scaler is not None:
            self._scaler.step(optimizer)
            self._scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self._micro_steps = 0
        self._window_samples = 0

    def _downgrade(self, name: str, value: Any, why: str) -> None:
        note = f"{name}: {getattr(self.knobs, name)!r} -> {value!r} ({why})"
        logger.warning("knob %s", note)
        self.notes.append(note)
        self.knobs = replace(self.knobs, **{name: value})
        if self._ctx is not None:  # the trial's record follows what runs
            self._ctx.record_knobs(self.effective(), self.notes)


def checkpointed(module: nn.Module) -> nn.Module:
    """``module`` wrapped so that, in training, its activations are recomputed in backward."""
    return _Checkpointed(module)


class _Checkpointed(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: Any) -> Any:
        if self.training and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint

            return checkpoint(self.inner, *args, use_reentrant=False)
        return self.inner(*args)


def _scale_gradients(optimizer: torch.optim.Optimizer, factor: float) -> None:
    with torch.no_grad():
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    param.grad.mul_(factor)


def _set_backend_flags(knobs: Knobs) -> None:
    # The legacy flags, not fp32_precision: torch refuses to read the precision
    # back once the two APIs are mixed, and user code mostly uses these.
    torch.backends.cuda.matmul.allow_tf32 = knobs.tf32
    torch.backends.cudnn.allow_tf32 = knobs.tf32
    torch.backends.cudnn.benchmark = knobs.cudnn_benchmark


def _gpu_share(ctx: TrialContext | None) -> float:
    """The GPU share Ray gave the trial (a whole GPU outside a search)."""
    share = ctx.resources.get("GPU", 0.0) if ctx is not None else 0.0
    return share if share > 0 else 1.0


def _cuda_peaks(device: torch.device) -> Callable[[], dict[str, float]]:
    torch.cuda.reset_peak_memory_stats(device)

    def read() -> dict[str, float]:
        return {
            "peak_memory_mb": torch.cuda.max_memory_allocated(device) / 2**20,
            "peak_memory_reserved_mb": torch.cuda.max_memory_reserved(device) / 2**20,
        }

    return read
