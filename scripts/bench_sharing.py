"""The sharing model's constants, measured: a CUDA context's memory, time-slicing and MPS.

``hpsearch.simulation``'s sharing model has constants to calibrate on a real
GPU (``telemetry.simulated.sharing`` and the simulated workload's ``context_mb``):

* **context MB**: what one process holds on the GPU after its first tensor,
  beyond what PyTorch allocated (NVML's per-process figure less torch's
  reserved memory);
* **switch cost**: n processes (1, 2, 4, 8) run a GPU-filling matmul loop at
  once; each progresses at ``r_n`` of its solo speed, so they keep ``n r_n`` of
  one alone in aggregate; the model's switch cost is what contention loses,
  ``1 - n r_n``, averaged over the counts above one (on the H200 it was the same
  at 2, 4 and 8: a loss paid once the GPU is contended, not per process);
* **MPS**: where ``nvidia-cuda-mps-control`` is installed, the same with small
  kernels under an MPS daemon against time-slicing: the aggregate gain
  (``mps_max_speedup``) and MPS's own per-process cost (``mps_switch_cost``).

``scripts/gpu_calibrate.py`` turns this file into a config fragment.

    python scripts/bench_sharing.py --real       # benchmarks/results/sharing-<date>-<gpu>.json
    python scripts/bench_sharing.py --dry-run    # the same steps on CPU, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
COUNTS = (1, 2, 4, 8)


def worker(kind: str, device: str, seconds: float, gate: str | None) -> dict[str, Any]:
    """One process: its context's memory, or its kernel loop's iterations per second."""
    import torch

    if kind == "context":
        return context_mb(device)
    size = 4096 if kind == "filling" else 256
    if device == "cpu":
        size = 512 if kind == "filling" else 64
    a = torch.randn(size, size, device=device)
    for _ in range(3):
        a @ a
    _synchronize(device)
    if gate is not None:  # every process starts its timed loop at once
        folder = Path(gate)
        (folder / f"ready-{os.getpid()}").touch()
        while not (folder / "go").exists():
            time.sleep(0.001)
    began, iterations = time.perf_counter(), 0
    while time.perf_counter() - began < seconds:
        for _ in range(10):
            a @ a
        _synchronize(device)
        iterations += 10
    return {"iterations_per_sec": iterations / (time.perf_counter() - began)}


def context_mb(device: str) -> dict[str, Any]:
    """What this process holds on its GPU beyond torch's own reservations, in MiB."""
    import torch

    if device == "cpu":
        import resource

        torch.zeros(1)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"context_mb": None, "process_rss_mb": round(rss, 1), "what": "no GPU: RSS only"}
    import pynvml

    torch.zeros(1, device=device)
    torch.cuda.synchronize()
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        used = {
            p.pid: p.usedGpuMemory
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            if p.usedGpuMemory is not None
        }
    finally:
        pynvml.nvmlShutdown()
    mine = used.get(os.getpid())
    reserved = torch.cuda.memory_reserved() / 2**20
    return {
        "context_mb": None if mine is None else round(mine / 2**20 - reserved, 1),
        "process_mb": None if mine is None else round(mine / 2**20, 1),
        "torch_reserved_mb": round(reserved, 1),
    }


def _memory_total_mb() -> float:
    """The first GPU's memory, in MiB, from NVML."""
    import pynvml

    pynvml.nvmlInit()
    try:
        info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
        return round(float(info.total) / 2**20, 1)
    finally:
        pynvml.nvmlShutdown()


def _synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def at_once(kind: str, n: int, device: str, seconds: float, env: dict[str, str]) -> list[float]:
    """``n`` processes running ``kind`` at once; each one's iterations per second."""
    gate = Path(tempfile.mkdtemp(prefix="hpsearch-sharing-"))

    def one(_: int) -> float:
        run = {"kind": kind, "device": device, "seconds": seconds, "gate": str(gate)}
        done = subprocess.run(
            [sys.executable, __file__, "--worker", json.dumps(run)],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        return float(json.loads(done.stdout.splitlines()[-1])["iterations_per_sec"])

    with ThreadPoolExecutor(n) as pool:
        running = [pool.submit(one, i) for i in range(n)]
        while len(list(gate.glob("ready-*"))) < n and not any(f.done() for f in running):
            time.sleep(0.01)
        (gate / "go").touch()
        rates = [f.result() for f in running]
    shutil.rmtree(gate, ignore_errors=True)
    how = "MPS" if "CUDA_MPS_PIPE_DIRECTORY" in env else "time-sliced"
    print(f"  {kind} x{n} ({how}): {sum(rates):.1f} it/s in all", flush=True)
    return rates


def switch_costs(rates: dict[int, list[float]]) -> dict[str, Any]:
    """Each n's per-process share of solo speed and aggregate, and the switch cost they imply."""
    solo = statistics.mean(rates[1])
    per_n: dict[str, Any] = {}
    for n, figures in sorted(rates.items()):
        share = statistics.mean(figures) / solo
        per_n[str(n)] = {"per_process_share": round(share, 4), "aggregate": round(n * share, 4)}
    cost = contention_loss(per_n)
    return {"per_count": per_n, "switch_cost": None if cost is None else round(cost, 4)}


def contention_loss(per_count: dict[str, Any]) -> float | None:
    """The sharing model's switch cost: one less the mean aggregate of the counts above one
    (``None``: none measured), never below 0 (processes that gained lost nothing)."""
    shared = [float(v["aggregate"]) for n, v in per_count.items() if int(n) > 1]
    if not shared:
        return None
    return max(0.0, 1.0 - statistics.mean(shared))


def _with_repo(path: str | None) -> str:
    """``PYTHONPATH`` with the repository first, extended, never replaced: a site the
    interpreter finds through it (the GPU kit's) stays visible to the workers."""
    return os.pathsep.join(filter(None, [str(REPO), path]))


class MpsDaemon:
    """An MPS control daemon of this run's own (its pipe and log folders in a temp dir)."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="hpsearch-mps-"))
        self.env = {
            **os.environ,
            "CUDA_MPS_PIPE_DIRECTORY": str(self.folder / "pipe"),
            "CUDA_MPS_LOG_DIRECTORY": str(self.folder / "log"),
        }

    def __enter__(self) -> dict[str, str]:
        for sub in ("pipe", "log"):
            (self.folder / sub).mkdir()
        subprocess.run(["nvidia-cuda-mps-control", "-d"], env=self.env, check=True)
        return self.env

    def __exit__(self, *_: object) -> None:
        subprocess.run(
            ["nvidia-cuda-mps-control"], input="quit\n", text=True, env=self.env, check=False
        )
        shutil.rmtree(self.folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", action="store_true", help="on this machine's NVIDIA GPU")
    parser.add_argument("--dry-run", action="store_true", help="the same steps on CPU, briefly")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run = json.loads(args.worker)
        print(json.dumps(worker(run["kind"], run["device"], run["seconds"], run.get("gate"))))
        return
    if not (args.real or args.dry_run):
        parser.error("--real (an NVIDIA GPU) or --dry-run (CPU)")
    device = "cuda" if args.real else "cpu"
    counts = COUNTS if args.real else (1, 2)
    seconds = args.seconds if args.real else 0.2
    env = {**os.environ, "PYTHONPATH": _with_repo(os.environ.get("PYTHONPATH"))}
    context = json.loads(
        subprocess.run(
            [sys.executable, __file__, "--worker", json.dumps(
                {"kind": "context", "device": device, "seconds": 0}
            )],
            capture_output=True, text=True, check=True, env=env,
        ).stdout.splitlines()[-1]
    )  # fmt: skip
    print(f"  context: {json.dumps(context)}", flush=True)
    time_sliced = {n: at_once("filling", n, device, seconds, env) for n in counts}
    small = {n: at_once("small", n, device, seconds, env) for n in (1, counts[-1])}
    result: dict[str, Any] = {
        "memory_total_mb": _memory_total_mb() if args.real else None,
        "context": context,
        "time_sliced_filling": switch_costs(time_sliced),
        "time_sliced_small": switch_costs(small),
    }
    if args.real and shutil.which("nvidia-cuda-mps-control"):
        with MpsDaemon() as daemon_env:
            mps_env = {**daemon_env, "PYTHONPATH": _with_repo(daemon_env.get("PYTHONPATH"))}
            mps_small = {n: at_once("small", n, device, seconds, mps_env) for n in (1, counts[-1])}
            mps_filling = {n: at_once("filling", n, device, seconds, mps_env) for n in counts}
        n = counts[-1]
        gain = sum(mps_small[n]) / sum(small[n])
        result["mps"] = {
            "small_aggregate_over_time_sliced": round(gain, 4),
            "mps_max_speedup": round(max(1.0, gain), 4),
            "filling": switch_costs(mps_filling),
        }
    else:
        result["mps"] = {
            "skipped": "no GPU" if not args.real else "nvidia-cuda-mps-control not found"
        }
    from bench_oom import gpu_name, result_path  # scripts/ is on the path when a script runs

    where = gpu_name() if args.real else None
    payload = {
        "date": time.strftime("%Y-%m-%d"),
        "device": where or "CPU (dry run: no GPU constants)",
        "dry_run": not args.real,
        "seconds_per_measurement": seconds,
        "results": result,
    }
    out = args.out or result_path("sharing", where, "" if args.real else "-dry-run")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
