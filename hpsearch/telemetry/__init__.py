"""GPU telemetry: backends that read GPUs (NVML, simulated), the monitor, summaries and advice.

The tree: ``_base`` (what a reading is, the backend interface), ``_nvml`` and
``_simulated`` (the backends), ``_sharing`` (how trials that share a simulated
GPU slow each other), ``_pace`` (those speeds, for workers that play trials in
real time), ``_speed`` (a trial's solo-equivalent speed), ``_trace`` (samples
as CSV), ``_monitor`` (the sampling thread), ``_summary`` (statistics,
implausible readings), ``_advice`` (verdicts and recommendations), ``_report``
(the monitor's report), ``_trials`` (per-trial GPU series and speed shares), ``_nodes`` (every
monitored node's readings, and each trial's series from its node),
``_watch`` (``hpsearch monitor``). Which backend a config asks for is opened by
the composition root (:mod:`hpsearch.backends`).
"""

from hpsearch.telemetry._advice import (
    PackingEstimate,
    Verdict,
    packing_estimate,
    recommendations,
    verdict_of,
)
from hpsearch.telemetry._base import (
    GpuInfo,
    GpuProcess,
    GpuReadings,
    GpuSample,
    LoadSink,
    TelemetryBackend,
    TelemetryUnavailable,
    TrialLoad,
)
from hpsearch.telemetry._fit import (
    MEMORY_HEADROOM,
    MOST_TRIALS_PER_GPU,
    SATURATION_UTIL_PCT,
    TARGET_UTIL_PCT,
    Fit,
    fit,
)
from hpsearch.telemetry._monitor import HISTORY_S, GpuMonitor
from hpsearch.telemetry._nodes import ClusterGpuMetrics, ClusterReadings
from hpsearch.telemetry._nvml import NvmlBackend
from hpsearch.telemetry._pace import PacePublisher, PaceReader, SharedGpus
from hpsearch.telemetry._report import render_report
from hpsearch.telemetry._sharing import CUDA_CONTEXT_MB, GpuDemand, SharingModel, cpu_rate
from hpsearch.telemetry._simulated import ConstantBackend, LoadModelBackend, TraceBackend
from hpsearch.telemetry._speed import (
    SOLO_SUFFIX,
    SPEED_SHARE,
    is_speed,
    objective_reading,
    solo_metrics,
    solo_name,
)
from hpsearch.telemetry._summary import (
    POWER_SPIKE_FACTOR,
    DroppedReading,
    GpuSummary,
    Reading,
    Stats,
    implausible_readings,
    summarize,
)
from hpsearch.telemetry._trace import (
    BUILTIN_TRACES,
    COLUMNS,
    TraceError,
    TraceWriter,
    read_trace,
    trace_path,
)
from hpsearch.telemetry._trials import SeriesPoint, TrialGpuMetrics, TrialGpuReport
from hpsearch.telemetry._watch import WatchResult, watch

__all__ = [
    "BUILTIN_TRACES",
    "COLUMNS",
    "CUDA_CONTEXT_MB",
    "HISTORY_S",
    "MEMORY_HEADROOM",
    "MOST_TRIALS_PER_GPU",
    "POWER_SPIKE_FACTOR",
    "SATURATION_UTIL_PCT",
    "SOLO_SUFFIX",
    "SPEED_SHARE",
    "TARGET_UTIL_PCT",
    "ClusterGpuMetrics",
    "ClusterReadings",
    "ConstantBackend",
    "DroppedReading",
    "Fit",
    "GpuDemand",
    "GpuInfo",
    "GpuMonitor",
    "GpuProcess",
    "GpuReadings",
    "GpuSample",
    "GpuSummary",
    "LoadModelBackend",
    "LoadSink",
    "NvmlBackend",
    "PacePublisher",
    "PaceReader",
    "PackingEstimate",
    "Reading",
    "SeriesPoint",
    "SharedGpus",
    "SharingModel",
    "Stats",
    "TelemetryBackend",
    "TelemetryUnavailable",
    "TraceBackend",
    "TraceError",
    "TraceWriter",
    "TrialGpuMetrics",
    "TrialGpuReport",
    "TrialLoad",
    "Verdict",
    "WatchResult",
    "cpu_rate",
    "fit",
    "implausible_readings",
    "is_speed",
    "objective_reading",
    "packing_estimate",
    "read_trace",
    "recommendations",
    "render_report",
    "solo_metrics",
    "solo_name",
    "summarize",
    "trace_path",
    "verdict_of",
    "watch",
]
