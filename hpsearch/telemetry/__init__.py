"""GPU telemetry: what GPUs read (NVML), the monitor that samples them, and what it measured.

Readings only: simulated GPUs are in :mod:`hpsearch.simulation`, the packing
arithmetic in :mod:`hpsearch.placement`, ``hpsearch monitor``'s report and advice
in :mod:`hpsearch.monitoring`. Which backend a config asks for is opened by
:mod:`hpsearch.gpu_telemetry`.

The tree: ``_base`` (what a reading is, the backend interface), ``_nvml`` (NVIDIA
GPUs), ``_devices`` (which GPU a ``CUDA_VISIBLE_DEVICES`` entry names, by NVML's
numbers and UUIDs), ``_monitor`` (the sampling thread, on an injectable clock),
``_summary`` (statistics, implausible readings), ``_csv`` (samples as CSV:
``hpsearch monitor --csv`` and traces), ``_trials`` (per-trial GPU series and speed shares),
``_nodes`` (every monitored node's readings, and each trial's series from its
node), ``_speed`` (a trial's solo-equivalent speed).
"""

from hpsearch.telemetry._base import (
    GpuDemand,
    GpuInfo,
    GpuLoad,
    GpuProcess,
    GpuReadings,
    GpuSample,
    LoadSink,
    SpeedModel,
    TelemetryBackend,
    TelemetryUnavailable,
    TrialLoad,
)
from hpsearch.telemetry._csv import COLUMNS, TraceError, TraceWriter, read_trace
from hpsearch.telemetry._devices import (
    MPS_ENV,
    NVIDIA_DRIVER,
    cuda_device,
    gpu_uuids,
    local_gpu_uuids,
    names_mig,
    user_daemon,
    visible_gpus,
)
from hpsearch.telemetry._gpm import GpmReader, GpmReading, gpm_supported
from hpsearch.telemetry._monitor import HISTORY_S, GpuMonitor
from hpsearch.telemetry._nodes import ClusterGpuMetrics, ClusterReadings
from hpsearch.telemetry._nvml import NvmlBackend
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
from hpsearch.telemetry._trials import SeriesPoint, TrialGpuMetrics, TrialGpuReport

__all__ = [
    "COLUMNS",
    "HISTORY_S",
    "MPS_ENV",
    "NVIDIA_DRIVER",
    "POWER_SPIKE_FACTOR",
    "SOLO_SUFFIX",
    "SPEED_SHARE",
    "ClusterGpuMetrics",
    "ClusterReadings",
    "DroppedReading",
    "GpmReader",
    "GpmReading",
    "GpuDemand",
    "GpuInfo",
    "GpuLoad",
    "GpuMonitor",
    "GpuProcess",
    "GpuReadings",
    "GpuSample",
    "GpuSummary",
    "LoadSink",
    "NvmlBackend",
    "Reading",
    "SeriesPoint",
    "SpeedModel",
    "Stats",
    "TelemetryBackend",
    "TelemetryUnavailable",
    "TraceError",
    "TraceWriter",
    "TrialGpuMetrics",
    "TrialGpuReport",
    "TrialLoad",
    "cuda_device",
    "gpm_supported",
    "gpu_uuids",
    "implausible_readings",
    "is_speed",
    "local_gpu_uuids",
    "names_mig",
    "objective_reading",
    "read_trace",
    "solo_metrics",
    "solo_name",
    "summarize",
    "user_daemon",
    "visible_gpus",
]
