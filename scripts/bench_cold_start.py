"""Where a trial worker's first seconds go: imports, the CUDA context, the first and later trials.

On the H200 (2026-11-27) a packed search's first trial in each worker took 10-14 s
and the next ones 1.1-1.9 s: the cold start, not packing, sets the floor of a short
search's time. This times, in fresh processes, each stage a Ray trial worker goes
through before its first result (``import ray``, ``import torch``, the CUDA context
and first kernel, ``import hpsearch``'s digits workload, its data, the first
optimizer (torch imports its compiler then), the first trial, a second trial in the
same process), alone and ``--at-once`` processes started together, and
prints the medians.

    python scripts/bench_cold_start.py                  # an NVIDIA GPU: cuda
    python scripts/bench_cold_start.py --device cpu     # the same stages on CPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The idle digits trial of the packing step (bench_packing.py --real): 15 epochs.
PARAMS: dict[str, Any] = {"lr": 3e-3, "width": 128, "epochs": 15}
STAGES = (
    "import_ray",
    "import_torch",
    "cuda_context",
    "import_workload",
    "data",
    "first_optimizer",
    "trial_1",
    "trial_2",
)


def stages(device: str, epochs: int) -> dict[str, float]:
    """One fresh process's seconds per stage (run as ``--one``)."""
    seconds: dict[str, float] = {}
    mark = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        seconds[name] = round(now - mark, 3)
        mark = now

    import ray  # noqa: F401 - a Ray worker imports it before anything of ours

    lap("import_ray")
    import torch

    if device == "cpu":
        torch.set_num_threads(1)  # as in a Ray worker of one CPU (OMP_NUM_THREADS=1)
    lap("import_torch")
    if device == "cuda":
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()
    lap("cuda_context")
    from hpsearch.trial.context import TrialContext
    from hpsearch.workloads.digits import load_split, train

    lap("import_workload")
    load_split()
    lap("data")
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])  # torch imports its compiler here
    lap("first_optimizer")
    for name in ("trial_1", "trial_2"):
        train({**PARAMS, "epochs": epochs}, TrialContext.local(device=device))
        lap(name)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--at-once", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=PARAMS["epochs"], help="per trial")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(stages(args.device, args.epochs)))
        return
    results: dict[str, Any] = {}
    for count in sorted({1, args.at_once}):
        command = [sys.executable, __file__, "--one", "--device", args.device]
        command += ["--epochs", str(args.epochs)]
        began = time.perf_counter()
        children = [
            subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=REPO)
            for _ in range(count)
        ]
        runs = [json.loads(c.communicate()[0].strip().splitlines()[-1]) for c in children]
        wall = time.perf_counter() - began
        median = {s: round(statistics.median(r[s] for r in runs), 3) for s in STAGES}
        results[f"processes_{count}"] = {
            "median_s": median,
            "max_s": {s: max(r[s] for r in runs) for s in STAGES},
            "wall_s": round(wall, 2),
        }
        print(f"{count} at once: {json.dumps(median)} (wall {wall:.1f} s)", flush=True)
    from bench_oom import gpu_name, result_path, write_with_targets  # scripts/ is on the path

    device = gpu_name() if args.device == "cuda" else None
    payload = {
        "date": time.strftime("%Y-%m-%d"),
        "device": device or "CPU",
        "params": {**PARAMS, "epochs": args.epochs},
        "results": results,
    }
    write_with_targets(
        args.out or result_path("cold-start", device, "" if device else "-cpu"), payload
    )


if __name__ == "__main__":
    main()
