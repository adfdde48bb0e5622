"""Packing off against auto: the same search (seed, trial budget) run both ways, per workload.

For each workload it runs the search with ``packing.mode: off`` (one trial per
GPU) and ``auto``, and reports the wall time to the trial budget, trials per
hour, the mean aggregate GPU utilisation, the best trial's accuracy, and the
packing decisions (the most trials a GPU was allowed, and why).

On simulated GPUs (the default) the workloads are scripted loads: the seeds'
RTX 4050 case (11% utilisation, 167 MiB), a saturating one (95%) and a
memory-heavy one (3.5 GB of 6 GB). A simulated trial does not slow down when
its GPU is shared, so the simulated wall times show what the decisions are, not
a speed-up; the headline comes from ``--real`` on an NVIDIA GPU, where the idle
case is the digits MLP and the filling case a large CNN→LSTM.

    python scripts/bench_packing.py         # benchmarks/results/packing-<date>-simulated.json
    python scripts/bench_packing.py --real  # packing-<date>-<gpu name>.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from bench_oom import gpu_name, result_path  # scripts/ is on the path when a script runs
from rich.console import Console

STEP_S = 0.0036  # the simulated workload's step at batch 64, width 256, depth 1

SIMULATED: dict[str, dict[str, Any]] = {
    "idle-11pct": {"utilization_pct": 11.0, "memory_mb": 167.0},
    "saturating-95pct": {"utilization_pct": 95.0, "memory_mb": 800.0},
    "memory-heavy-3.5GB": {"utilization_pct": 20.0, "memory_mb": 3500.0},
}


def simulated_config(name: str, mode: str, trials: int, seconds: float) -> dict[str, Any]:
    """A search of trials that each put the workload's load on a simulated RTX 4050."""
    epochs = 4
    return {
        "study": {"name": f"bench-packing-{name}-{mode}", "sampler": {"type": "tpe", "seed": 0}},
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "train": "hpsearch.workloads.simulated_gpu:train",
        "space": {
            "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
            "width": [128, 256],
            "batch_size": 64,
            "depth": 1,
            "epochs": epochs,
            "steps_per_epoch": round(seconds / epochs / STEP_S),
            **SIMULATED[name],
        },
        "execution": {"num_cpus": 16},
        "packing": {"mode": mode, "probe_seconds": 2, "cooldown_seconds": 10},
        "telemetry": {
            "backend": "simulated",
            "interval_s": 0.5,
            "simulated": {"source": "load", "gpus": 1},
        },
    }


def real_config(name: str, mode: str, trials: int) -> dict[str, Any]:
    """A search on the NVIDIA GPU: the digits MLP (leaves it idle) or a large CNN→LSTM."""
    if name == "idle-digits":
        train = "hpsearch.workloads.digits:train"
        space: dict[str, Any] = {
            "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
            "width": [64, 128, 256],
            "epochs": 15,
        }
    else:
        train = "hpsearch.workloads.sequences:train"
        space = {
            "lr": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
            "conv_channels": 512,
            "hidden_size": [1024, 1536],
            "lstm_layers": 2,
            "batch_size": 256,
            "train_size": 8192,
            "epochs": 3,
        }
    return {
        "study": {"name": f"bench-packing-{name}-{mode}", "sampler": {"type": "tpe", "seed": 0}},
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "train": train,
        "space": space,
        "packing": {"mode": mode, "probe_seconds": 5, "cooldown_seconds": 20},
        "telemetry": {"backend": "nvml", "interval_s": 0.5},
    }


def run(config: dict[str, Any], trials: int) -> dict[str, Any]:
    """Run one search in a fresh folder; return its figures."""
    from mlflow.tracking import MlflowClient

    import hpsearch

    with tempfile.TemporaryDirectory() as folder:
        previous = os.getcwd()
        os.chdir(folder)
        try:
            path = Path(folder) / "bench.yaml"
            config["study"]["n_trials"] = trials
            path.write_text(yaml.safe_dump(config))
            started = time.perf_counter()
            outcome = hpsearch.run(path, console=Console(file=io.StringIO()))
            wall = time.perf_counter() - started
            # An absolute URI: MLflow caches stores by URI, and each search has its own folder.
            client = MlflowClient(f"sqlite:///{Path(folder) / 'mlruns' / 'mlflow.db'}")
            run_id = outcome.mlflow_parent_run_id
            assert run_id is not None
            metrics = client.get_run(run_id).data.metrics
            decisions = json.loads(
                Path(
                    client.download_artifacts(run_id, "packing_decisions.json", folder)
                ).read_text()
            )
            study = outcome.results.study
        finally:
            os.chdir(previous)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    limits = [d["limit"] for d in decisions]
    return {
        "wall_s": round(wall, 2),
        "trials": len(study.trials),
        "complete": len(complete),
        "failed": sum(t.state.name == "FAIL" for t in study.trials),
        "trials_per_hour": round(len(study.trials) / wall * 3600, 1),
        "mean_gpu_utilization_pct": metrics.get("gpu0_utilization_mean_pct"),
        "best_val_accuracy": max((t.value for t in complete if t.value is not None), default=None),
        "most_trials_allowed_per_gpu": max(limits, default=None),
        "decisions": decisions,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real", action="store_true", help="run on this machine's NVIDIA GPU")
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--seconds", type=float, default=6.0, help="simulated trial length")
    parser.add_argument("--workloads", help="comma-separated subset of the workloads")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    names = ["idle-digits", "filling-cnn-lstm"] if args.real else list(SIMULATED)
    if args.workloads:
        names = [n for n in names if n in args.workloads.split(",")]
    results: dict[str, Any] = {}
    for name in names:
        per_mode = {}
        for mode in ("off", "auto"):
            config = (
                real_config(name, mode, args.trials)
                if args.real
                else simulated_config(name, mode, args.trials, args.seconds)
            )
            per_mode[mode] = run(config, args.trials)
            print(name, mode, {k: v for k, v in per_mode[mode].items() if k != "decisions"})
        off, auto = per_mode["off"], per_mode["auto"]
        results[name] = {
            **per_mode,
            "speedup_auto_over_off": round(off["wall_s"] / auto["wall_s"], 3),
        }
    device = gpu_name() if args.real else "simulated RTX 4050 Laptop GPU (6 GB), no GPU here"
    out = args.out or result_path("packing", device if args.real else None)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "date": time.strftime("%Y-%m-%d"),
        "device": device,
        "cpu_count": os.cpu_count(),
        "trials": args.trials,
        "results": results,
    }
    out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
