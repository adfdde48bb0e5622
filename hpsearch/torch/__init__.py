"""Training toolkit: the throughput knobs of a trial applied in a few lines, and measured.

``configure(params, ctx)`` reads batch size, DataLoader workers, prefetch, pinned
memory, persistent workers, non-blocking copies, precision (fp32, fp16 with a
GradScaler, bf16), TF32, cudnn.benchmark, channels_last, torch.compile,
gradient accumulation and gradient checkpointing from the trial's parameters,
sets them (each one, on or off), and returns a :class:`TrainingSetup` whose
loader, model preparation and training step honour them. Its
:class:`ThroughputMeter` adds ``samples_per_sec``, ``step_time_ms``,
``data_wait_share``, ``train_seconds`` and ``peak_memory_mb`` to every ``ctx.report``.
"""

from hpsearch.torch._knobs import (
    COMPILE_MODES,
    KNOB_NAMES,
    PRECISIONS,
    Device,
    Knobs,
    effective_knobs,
    knobs_from_params,
)
from hpsearch.torch._meter import ThroughputMeter, batch_size_of
from hpsearch.torch._setup import TrainingSetup, checkpointed, configure, probe_device

__all__ = [
    "COMPILE_MODES",
    "KNOB_NAMES",
    "PRECISIONS",
    "Device",
    "Knobs",
    "ThroughputMeter",
    "TrainingSetup",
    "batch_size_of",
    "checkpointed",
    "configure",
    "effective_knobs",
    "knobs_from_params",
    "probe_device",
]
