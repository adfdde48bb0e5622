"""Throughput knobs: what a trial asked for, and what applies on the device it got.

Pure: reading parameters and deciding effective values touches no global state,
so the rules (fp16 needs CUDA, a prefetch factor needs DataLoader workers, ...)
are tested without a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

Precision = Literal["fp32", "fp16", "bf16"]
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16")
COMPILE_MODES: tuple[str, ...] = ("default", "reduce-overhead", "max-autotune")


@dataclass(frozen=True)
class Knobs:
    """The throughput settings of one trial.

    Attributes:
        batch_size: samples per forward/backward pass (the micro-batch).
        grad_accum_steps: micro-batches per optimizer step; the effective batch is
            ``batch_size * grad_accum_steps``.
        num_workers: DataLoader worker processes (0 loads in the training process).
        prefetch_factor: batches each worker loads ahead (only with workers).
        pin_memory: page-locked host batches for faster copies to a GPU;
            ``None`` pins exactly when training on CUDA.
        persistent_workers: keep DataLoader workers between epochs (only with workers).
        non_blocking: asynchronous host-to-GPU copies; ``None`` when on CUDA.
        precision: ``fp32``; ``fp16`` autocast with a GradScaler; ``bf16`` autocast.
        tf32: TensorFloat-32 matmuls and convolutions on Ampere or later GPUs.
        cudnn_benchmark: let cuDNN time its algorithms for the shapes seen.
        channels_last: NHWC memory format for 4-D activations and weights.
        compile: ``torch.compile`` the model, with ``compile_mode``.
        compile_mode: ``default``, ``reduce-overhead`` or ``max-autotune``.
        grad_checkpointing: recompute activations in backward instead of keeping them.
    """

    batch_size: int = 64
    grad_accum_steps: int = 1
    num_workers: int = 0
    prefetch_factor: int | None = None
    pin_memory: bool | None = None
    persistent_workers: bool = True
    non_blocking: bool | None = None
    precision: Precision = "fp32"
    tf32: bool = False
    cudnn_benchmark: bool = False
    channels_last: bool = False
    compile: bool = False
    compile_mode: str = "default"
    grad_checkpointing: bool = False

    @property
    def effective_batch_size(self) -> int:
        """Samples per optimizer step."""
        return self.batch_size * self.grad_accum_steps

    def as_dict(self) -> dict[str, Any]:
        """Every knob by name, plus ``effective_batch_size``."""
        return {**asdict(self), "effective_batch_size": self.effective_batch_size}


KNOB_NAMES: frozenset[str] = frozenset(f.name for f in fields(Knobs)) | {"effective_batch_size"}
"""Parameter names the toolkit reads; every other parameter is the user's."""


def knobs_from_params(params: Mapping[str, Any]) -> Knobs:
    """Read the knobs from a trial's parameters; names it does not know are left alone.

    ``effective_batch_size`` (samples per optimizer step) sets ``grad_accum_steps``
    to ``effective_batch_size / batch_size``, so a search over the micro-batch
    keeps the optimisation the same; it must be a multiple of ``batch_size``.
    The string forms YAML choices often take (``"true"``, ``"none"``) are accepted.

    Raises:
        ValueError: a knob with a value the toolkit cannot use, named with the fix.
    """
    values: dict[str, Any] = {}
    for field in fields(Knobs):
        if field.name in params:
            values[field.name] = _coerce(field.name, params[field.name])
    knobs = Knobs(**values)
    if "effective_batch_size" in params:
        target = _positive_int("effective_batch_size", params["effective_batch_size"])
        if target % knobs.batch_size:
            raise ValueError(
                f"effective_batch_size {target} is not a multiple of batch_size "
                f"{knobs.batch_size}; search batch sizes that divide it (e.g. powers of two)"
            )
        steps = target // knobs.batch_size
        if "grad_accum_steps" in params and knobs.grad_accum_steps != steps:
            raise ValueError(
                f"grad_accum_steps {knobs.grad_accum_steps} contradicts effective_batch_size "
                f"{target} / batch_size {knobs.batch_size} = {steps}; give one of the two"
            )
        knobs = replace(knobs, grad_accum_steps=steps)
    return knobs


@dataclass(frozen=True)
class Device:
    """What the trial's device supports, as far as the knobs care.

    Attributes:
        type: ``cuda`` or ``cpu``.
        bf16: bf16 autocast is supported (every CPU; CUDA from Ampere).
        tf32: TF32 is supported (CUDA compute capability 8.0 or later).
        compiler: ``torch.compile`` can build kernels (on CPU it needs a C++ compiler).
    """

    type: str
    bf16: bool = True
    tf32: bool = False
    compiler: bool = True


def effective_knobs(requested: Knobs, device: Device) -> tuple[Knobs, list[str]]:
    """The knobs that apply on ``device``, and one note for each one that changed.

    A knob that cannot apply is turned into what actually runs (fp16 on a CPU runs
    fp32), never silently dropped: every change comes back as a note to log and record.
    """
    notes: list[str] = []
    knobs = requested
    cuda = device.type == "cuda"

    def change(name: str, value: Any, why: str) -> None:
        nonlocal knobs
        notes.append(f"{name}: {getattr(knobs, name)!r} -> {value!r} ({why})")
        knobs = replace(knobs, **{name: value})

    if knobs.precision == "fp16" and not cuda:
        change("precision", "fp32", f"fp16 autocast with a GradScaler needs CUDA; on {device.type}")
    elif knobs.precision == "bf16" and not device.bf16:
        change("precision", "fp32", "this GPU has no bf16 support")
    if knobs.tf32 and not (cuda and device.tf32):
        change("tf32", False, "TF32 needs an Ampere or later GPU" if cuda else "no CUDA device")
    if knobs.cudnn_benchmark and not cuda:
        change("cudnn_benchmark", False, "cuDNN runs on CUDA devices only")
    if knobs.pin_memory is None:
        knobs = replace(knobs, pin_memory=cuda)
    elif knobs.pin_memory and not cuda:
        change("pin_memory", False, "pinned memory only speeds up copies to a GPU")
    if knobs.non_blocking is None:
        knobs = replace(knobs, non_blocking=cuda)
    elif knobs.non_blocking and not cuda:
        change("non_blocking", False, "copies to the CPU are synchronous")
    if knobs.num_workers == 0:
        # DataLoader raises ValueError for either with num_workers=0.
        if knobs.prefetch_factor is not None:
            change("prefetch_factor", None, "DataLoader prefetches only with num_workers > 0")
        if knobs.persistent_workers:
            knobs = replace(knobs, persistent_workers=False)
    if knobs.compile and not device.compiler:
        change("compile", False, "torch.compile needs a C++ compiler on CPU; none found")
    return knobs, notes


def _non_negative_int(name: str, value: Any) -> int:
    number = _int(name, value)
    if number < 0:
        raise ValueError(f"{name} must be >= 0, got {number}")
    return number


def _optional_positive_int(name: str, value: Any) -> int | None:
    return None if _is_none(value) else _positive_int(name, value)


def _auto_bool(name: str, value: Any) -> bool | None:
    return None if _is_none(value) or value == "auto" else _bool(name, value)


def _precision(name: str, value: Any) -> str:
    text = str(value).lower()
    text = {"32": "fp32", "float32": "fp32", "16": "fp16", "float16": "fp16"}.get(text, text)
    if text not in PRECISIONS:
        raise ValueError(f"{name} must be one of {', '.join(PRECISIONS)}, got {value!r}")
    return text


def _compile_mode(name: str, value: Any) -> str:
    if value not in COMPILE_MODES:
        raise ValueError(f"{name} must be one of {', '.join(COMPILE_MODES)}, got {value!r}")
    return str(value)


def _is_none(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.lower() in ("none", "null"))


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"{name} must be true or false, got {value!r}")


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise ValueError(f"{name} must be an integer, got {value!r}")


def _positive_int(name: str, value: Any) -> int:
    number = _int(name, value)
    if number < 1 or not math.isfinite(number):
        raise ValueError(f"{name} must be >= 1, got {number}")
    return number


_COERCE: dict[str, Callable[[str, Any], Any]] = {
    "batch_size": _positive_int,
    "grad_accum_steps": _positive_int,
    "num_workers": _non_negative_int,
    "prefetch_factor": _optional_positive_int,
    "pin_memory": _auto_bool,
    "non_blocking": _auto_bool,
    "precision": _precision,
    "compile_mode": _compile_mode,
}
"""How each knob's value is read; the rest are booleans."""


def _coerce(name: str, value: Any) -> Any:
    coerce: Callable[[str, Any], Any] = _COERCE.get(name, _bool)
    return coerce(name, value)
