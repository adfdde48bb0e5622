"""What the GPU monitor costs: its sampling thread's CPU time over wall time, at 1 Hz.

Target: below 0.5% of one core. Each backend runs for ``--duration`` seconds in
a real :class:`~hpsearch.telemetry.GpuMonitor` (the thread hpsearch runs during a
search), and the thread's own CPU clock is read. A tight loop of ``--calls``
direct samples gives the cost of one sampling round with more precision.

Backends: the seed-004 trace replay and the load model (8 trials declared on 2
GPUs) always; NVML when this machine has an NVIDIA GPU (else recorded as skipped
with the reason).

    python scripts/bench_monitor.py    # writes benchmarks/results/monitor-<date>-<device>.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpsearch.simulation import LoadModelBackend, TraceBackend, trace_path
from hpsearch.telemetry import (
    GpuInfo,
    GpuLoad,
    GpuMonitor,
    NvmlBackend,
    TelemetryBackend,
    TelemetryUnavailable,
    TrialLoad,
)

REPO = Path(__file__).resolve().parents[1]
TARGET_SHARE_PCT = 0.5


def load_model() -> TelemetryBackend:
    """Two simulated GPUs with four declared trials each."""
    gpus = [GpuInfo(i, "Simulated RTX 4050 Laptop GPU", 6141.0, 115.0) for i in range(2)]
    backend = LoadModelBackend(gpus)
    for key in range(8):
        backend.set_load(key, TrialLoad(GpuLoad(11.4, 167.0), 1000 + key, (key % 2,)))
    return backend


def measure(
    backend: TelemetryBackend, duration_s: float, interval_s: float, calls: int
) -> dict[str, Any]:
    """Thread CPU over wall for ``duration_s``, then the CPU cost of one sampling round."""
    monitor = GpuMonitor(backend, interval_s=interval_s)
    with monitor:
        time.sleep(duration_s)
    share = 100 * monitor.sampler_cpu_s / monitor.wall_s
    started = time.thread_time()
    for _ in range(calls):
        monitor.sample_now()
    per_round_ms = 1000 * (time.thread_time() - started) / calls
    return {
        "backend": backend.describe(),
        "gpus": len(backend.gpus()),
        "wall_s": round(monitor.wall_s, 2),
        "samples": monitor.samples_taken - calls,
        "sampler_cpu_s": round(monitor.sampler_cpu_s, 5),
        "cpu_share_of_one_core_pct": round(share, 4),
        "cpu_per_round_ms": round(per_round_ms, 4),
        "within_target": share < TARGET_SHARE_PCT,
    }


def gpu_name() -> str | None:
    """The first NVIDIA GPU's name, or ``None`` without one."""
    try:
        backend = NvmlBackend()
    except TelemetryUnavailable:
        return None
    name = backend.gpus()[0].name
    backend.close()
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per backend")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--calls", type=int, default=1000, help="direct samples per backend")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    backends: dict[str, Callable[[], TelemetryBackend]] = {
        "simulated_trace_rtx4050_seed004": lambda: TraceBackend(trace_path("rtx4050-seed004")),
        "simulated_load_model_2gpu_8trials": load_model,
        "nvml": NvmlBackend,
    }
    results: dict[str, dict[str, Any]] = {}
    for name, make in backends.items():
        try:
            backend = make()
        except TelemetryUnavailable as exc:
            results[name] = {"skipped": str(exc)}
            print(f"{name:36s} skipped: {exc}", flush=True)
            continue
        try:
            results[name] = measure(backend, args.duration, args.interval, args.calls)
        finally:
            backend.close()
        r = results[name]
        print(
            f"{name:36s} {r['cpu_share_of_one_core_pct']:.4f}% of one core over {r['wall_s']} s "
            f"({r['samples']} samples); {r['cpu_per_round_ms']:.4f} ms CPU per round",
            flush=True,
        )

    device = gpu_name()
    report = {
        "benchmark": "GPU monitor cost",
        "date": time.strftime("%Y-%m-%d"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "gpu": device,
        },
        "interval_s": args.interval,
        "duration_s": args.duration,
        "target_cpu_share_pct": TARGET_SHARE_PCT,
        "results": results,
    }
    slug = (
        "cpu" if device is None else device.lower().replace("nvidia", "").strip().replace(" ", "-")
    )
    out = args.out or REPO / "benchmarks" / "results" / f"monitor-{report['date']}-{slug}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
