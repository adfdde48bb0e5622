"""What NVML's utilisation hides: GPM SM activity against ``utilization.gpu`` under two loads.

``utilization.gpu`` is the share of time *some* kernel runs, so a stream of
small kernels reads near 100% while most SMs idle. Where the driver has GPM
(Hopper and newer), ``NVML_GPM_METRIC_SM_UTIL`` and ``SM_OCCUPANCY`` say how much
of the SMs those kernels use. This samples both, every ``--interval`` seconds,
while a small-kernel loop (a digits-sized MLP) and then a GPU-filling matmul
loop run, and writes the readings and their means. Without GPM (or a GPU) it
records why, so the GPU kit goes on.

    python scripts/bench_gpm.py      # benchmarks/results/gpm-<date>-<gpu>.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any


def load(kind: str, stop: threading.Event) -> None:
    """Kernels until ``stop``: 256-wide matmuls (small) or 8192-wide ones (filling)."""
    import torch

    size = 256 if kind == "small" else 8192
    a = torch.randn(size, size, device="cuda")
    while not stop.is_set():
        for _ in range(20):
            a = torch.tanh(a @ a)
        torch.cuda.synchronize()


def sample(handle: Any, seconds: float, interval: float) -> dict[str, Any]:
    """GPM SM activity and occupancy, and utilization.gpu, over ``seconds``."""
    import pynvml

    from hpsearch.telemetry import GpmReader

    sm_util, occupancy, util = [], [], []
    reader = GpmReader(pynvml, handle)
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(interval)
            reading = reader.read()
            sm_util.append(reading.sm_util_pct)
            occupancy.append(reading.sm_occupancy_pct)
            util.append(float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
            print(f"  sm {reading.sm_util_pct:.1f}% util {util[-1]:.0f}%", flush=True)
    finally:
        reader.close()
    return {
        "utilization_gpu_pct": round(statistics.mean(util), 1),
        "gpm_sm_util_pct": round(statistics.mean(sm_util), 1),
        "gpm_sm_occupancy_pct": round(statistics.mean(occupancy), 1),
        "samples": len(util),
    }


def measure(seconds: float, interval: float) -> dict[str, Any]:
    """Both loads' readings, or why GPM could not be read."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no driver, no library: the reason is the result
        return {"skipped": f"NVML unavailable: {exc}"}
    from hpsearch.telemetry import gpm_supported

    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        if not gpm_supported(pynvml, handle):
            return {"skipped": "this GPU or driver has no GPM"}
        readings: dict[str, Any] = {}
        for kind in ("small", "filling"):
            print(f"{kind} kernels:", flush=True)
            stop = threading.Event()
            worker = threading.Thread(target=load, args=(kind, stop), daemon=True)
            worker.start()
            time.sleep(1.0)  # past the first kernels' start-up
            try:
                readings[kind] = sample(handle, seconds, interval)
            finally:
                stop.set()
                worker.join()
        return readings
    except Exception as exc:
        return {"failed": f"{type(exc).__name__}: {exc}"}
    finally:
        pynvml.nvmlShutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="sampled seconds per load")
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from bench_oom import result_path  # scripts/ is on the path when a script runs

    results = measure(args.seconds, args.interval)
    device = None
    if "skipped" not in results:
        from bench_oom import gpu_name

        device = gpu_name()
    payload = {"date": time.strftime("%Y-%m-%d"), "device": device, "results": results}
    out = args.out or result_path("gpm", device, "" if device else "-none")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
