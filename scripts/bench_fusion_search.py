"""The main job with fused trials against without: time to the trial budget, best, front.

Runs ``configs/phase1.yaml`` (the digits classifier, accuracy against speed)
as a user would, ``hpsearch run`` in a fresh process per search, with
``fusion: {mode: auto}`` (``hpsearch.workloads.digits:train_members``) and with
``fusion: off``, for each sampler seed, the same trial budget each. Per search:
the wall time to the budget, the best validation accuracy, and the
hypervolume of the accuracy/speed front (speed as its solo figure, reference
point (0, 0)). Targets (the issue "Fused trials"): auto reaches the budget at
least 1.5x sooner (median over seeds), with best accuracy and hypervolume no
worse (median).

    python scripts/bench_fusion_search.py                 # 3 seeds, 40 trials each
    python scripts/bench_fusion_search.py --seeds 0 --trials 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def config_for(mode: str, seed: int, trials: int) -> dict[str, Any]:
    """phase1 with ``fusion`` set to ``mode``, the sampler's seed and the budget."""
    config: dict[str, Any] = yaml.safe_load((REPO / "configs" / "phase1.yaml").read_text())
    config["study"]["name"] = f"phase1-fusion-{mode}-{seed}"
    config["study"]["n_trials"] = trials
    config["study"]["sampler"]["seed"] = seed
    config["study"].pop("timeout", None)
    config["fusion"] = (
        {"mode": "auto", "train": "hpsearch.workloads.digits:train_members"}
        if mode == "auto"
        else {"mode": "off"}
    )
    return config


def hypervolume(points: list[tuple[float, float]]) -> float:
    """The area two maximised objectives dominate above (0, 0)."""
    front = sorted(points, key=lambda p: -p[0])
    area, best_speed = 0.0, 0.0
    for accuracy, speed in front:
        if speed > best_speed:
            area += accuracy * (speed - best_speed)
            best_speed = speed
    return area


def search(mode: str, seed: int, trials: int) -> dict[str, Any]:
    """One search in a fresh folder and process; its figures."""
    import optuna

    with tempfile.TemporaryDirectory(prefix="bench-fusion-search-") as folder:
        path = Path(folder) / "phase1.yaml"
        path.write_text(yaml.safe_dump(config_for(mode, seed, trials)))
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "hpsearch", "run", str(path)],
            cwd=folder,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        wall = time.perf_counter() - began
        if done.returncode != 0:
            raise RuntimeError(f"{mode} seed {seed} failed:\n{done.stderr[-3000:]}")
        study = optuna.load_study(
            study_name=f"phase1-fusion-{mode}-{seed}",
            storage=f"sqlite:///{Path(folder) / 'mlruns' / 'optuna.db'}",
        )
        complete = [t for t in study.trials if t.values is not None]
        groups = [t.user_attrs.get("hpsearch.fused_group", {}).get("members", 1) for t in complete]
        return {
            "wall_s": round(wall, 1),
            "trials": len(study.trials),
            "complete": len(complete),
            "pruned": sum(t.state.name == "PRUNED" for t in study.trials),
            "best_val_accuracy": max((t.values[0] for t in complete), default=None),
            "hypervolume": round(hypervolume([(t.values[0], t.values[1]) for t in complete]), 1),
            "front": len(study.best_trials),
            "mean_group_size": round(statistics.mean(groups), 2) if groups else None,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    runs: dict[str, dict[str, Any]] = {}
    for seed in seeds:
        for mode in ("off", "auto"):
            runs[f"{mode}-{seed}"] = search(mode, seed, args.trials)
            print(mode, seed, runs[f"{mode}-{seed}"], flush=True)

    def median(mode: str, key: str) -> float:
        return statistics.median(float(runs[f"{mode}-{s}"][key]) for s in seeds)

    speedup = median("off", "wall_s") / median("auto", "wall_s")
    result = {
        "off_over_auto_wall": round(speedup, 3),
        "best_val_accuracy": {m: median(m, "best_val_accuracy") for m in ("off", "auto")},
        "hypervolume": {m: median(m, "hypervolume") for m in ("off", "auto")},
        "target_time_to_budget_at_least_1_5x_shorter": speedup >= 1.5,
        "target_best_accuracy_no_worse": median("auto", "best_val_accuracy")
        >= median("off", "best_val_accuracy"),
        "target_front_no_worse": median("auto", "hypervolume") >= median("off", "hypervolume"),
    }
    from bench_oom import write_with_targets  # scripts/ is on the path when a script runs

    payload = {
        "date": time.strftime("%Y-%m-%d"),
        "device": "CPU",
        "cpu_count": len(os.sched_getaffinity(0)),
        "trials": args.trials,
        "seeds": seeds,
        "runs": runs,
        "results": {"phase1": result},
    }
    out = args.out or (
        REPO / "benchmarks" / "results" / f"fusion-search-{time.strftime('%Y-%m-%d')}-cpu.json"
    )
    print(json.dumps(result, indent=1))
    write_with_targets(out, payload)


if __name__ == "__main__":
    main()
