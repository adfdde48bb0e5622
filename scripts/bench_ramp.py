"""Packing's ramp in wall-clock time: real Ray, logical GPUs, simulated telemetry, short trials.

Runs the H200 main job's trials as this machine can (the simulated workload: 2%
and 830 MiB of a 141 GB card, ten steps of 0.06 s, a loop waiting on its GPU)
with ``packing: auto``, and the same with ``off`` and ``fixed`` at the most
``auto`` may use, each in a fresh process with a Ray of its own, as a user runs
it. For ``auto`` it prints the ramp: each count the GPU was given (seconds after
the first trial's end, the count, why) and each verdict on the counts its
trials' steps measured (count, steps per second, gain over the count below,
kept or gone back from), then trials ended per second by two-second window.

Target (the "Pack within seconds" issue): at least two trials on the GPU within
5 s of the first trial's end.

``--workload busy-30pct-2s`` runs trials of 2 s that each keep the GPU 30% busy
(2 GB): three or four fill it, and eight only slow each other. Its ramp is read
while new trials' workers start up, holding no GPU context yet, which once made
each working trial look a third of its size (the ramp packed eight, then fell
to two at once). ``--workload bimodal-util`` runs trials of 1 s that keep the GPU
2% or 60% busy (a sampled choice, the same sequence in every mode): the search's
mean trial underpredicts two of its heavier ones, which saturate the GPU and still
finish sooner together. ``fixedN`` modes run N per GPU, ``fixed`` the most.

    python scripts/bench_ramp.py                  # benchmarks/results/ramp-<date>-cpu.json
    python scripts/bench_ramp.py --trials 96 --modes auto
    python scripts/bench_ramp.py --workload busy-30pct-2s --trials 24 --modes auto,off,fixed4,fixed8
    python scripts/bench_ramp.py --workload bimodal-util --trials 32 --modes auto,off,fixed4
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
WITHIN_S = 5.0
WINDOW_S = 2.0


WORKLOADS: dict[str, dict[str, Any]] = {
    # The H200 main job: 2% and 830 MiB of a 141 GB card, ten steps of 0.06 s.
    "h200-main-job": {"utilization_pct": 2.0, "memory_mb": 830.0, "steps_per_epoch": 17},
    # A trial of 2 s keeping the GPU 30% busy with 2 GB.
    "busy-30pct-2s": {"utilization_pct": 30.0, "memory_mb": 2000.0, "steps_per_epoch": 60},
    # Trials of 1 s, each 2% or 60% busy (sampled), 2 GB: the mean trial underpredicts
    # its heavier ones.
    "bimodal-util": {"utilization_pct": [2.0, 60.0], "memory_mb": 2000.0, "steps_per_epoch": 30},
}
"""Each workload's trials: what they ask of the simulated H200, and their length."""


def config(mode: str, trials: int, most: int, workload: str = "h200-main-job") -> dict[str, Any]:
    """The search: ``workload``'s trials on one simulated H200, packed per ``mode``
    (``fixedN``: N per GPU; ``fixed``: ``most``)."""
    packing: dict[str, Any] = {"mode": mode, "max_trials_per_gpu": most}
    if mode.startswith("fixed"):
        packing = {"mode": "fixed", "trials_per_gpu": int(mode.removeprefix("fixed") or most)}
    return {
        "study": {
            "name": f"ramp-{mode}",
            "sampler": {"type": "random", "seed": 0},
            "n_trials": trials,
        },
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "train": "hpsearch.workloads.simulated_gpu:train",
        "space": {
            "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
            "cpus": 0.1,
            "batch_size": 64,
            "width": 256,
            "depth": 1,
            "epochs": 10,
            **WORKLOADS[workload],
        },
        "execution": {"cpus_per_trial": 0.25},
        "packing": packing,
        "telemetry": {
            "backend": "simulated",
            "simulated": {"gpus": 1, "name": "Simulated NVIDIA H200", "memory_total_mb": 143771},
        },
    }


def one(mode: str, trials: int, most: int, workload: str) -> dict[str, Any]:
    """Run one search here (a fresh process); its timeline and decisions."""
    from rich.console import Console

    import hpsearch
    from hpsearch.tracking import MemoryTracker

    tracker = MemoryTracker()
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        Path("ramp.yaml").write_text(yaml.safe_dump(config(mode, trials, most, workload)))
        started = time.time()
        outcome = hpsearch.run("ramp.yaml", console=Console(file=io.StringIO()), tracker=tracker)
        wall = time.time() - started
        run = tracker.runs[outcome.mlflow_parent_run_id or ""]
        decisions = json.loads(run.artifacts.get("packing_decisions.json") or "[]")
        spans = [
            (t.datetime_start.timestamp(), t.datetime_complete.timestamp())
            for t in outcome.results.study.trials
            if t.datetime_start is not None and t.datetime_complete is not None
        ]
    return {"wall_s": wall, "spans": spans, "decisions": decisions}


def summary(mode: str, measured: dict[str, Any]) -> dict[str, Any]:
    """The timeline in seconds from the first trial's start: ends, counts, verdicts, windows."""
    spans = sorted(measured["spans"])
    origin = spans[0][0]
    ends = sorted(end - origin for _, end in spans)
    first_end = ends[0]
    ramp, judged = [], []
    for d in measured["decisions"]:
        at = round(d["time"] - origin, 2)
        if d["limit"] != d["previous"]:
            ramp.append({"at_s": at, "count": d["limit"], "was": d["previous"], "why": d["reason"]})
        for j in d.get("judged", []):
            judged.append({"at_s": at, **{k: v for k, v in j.items() if k != "reason"}})
    reached = [r["at_s"] for r in ramp if r["count"] >= 2]
    windows = []
    edge = 0.0
    while edge < ends[-1]:
        done = sum(edge <= end < edge + WINDOW_S for end in ends)
        windows.append({"from_s": edge, "trials_per_s": round(done / WINDOW_S, 2)})
        edge += WINDOW_S
    result: dict[str, Any] = {
        "mode": mode,
        "wall_s": round(measured["wall_s"], 1),
        "trials_s": round(ends[-1], 1),
        "first_end_s": round(first_end, 2),
        "ramp": ramp,
        "judged": judged,
        "ended_per_window": windows,
    }
    if mode == "auto":
        at = reached[0] if reached else None
        result["two_per_gpu_at_s"] = at
        result["target_two_within_5s_of_first_end"] = at is not None and at <= first_end + WITHIN_S
    return result


def show(result: dict[str, Any]) -> None:
    print(f"{result['mode']}: {result['trials_s']} s of trials, first ended at "
          f"{result['first_end_s']} s, {result['wall_s']} s in all", flush=True)  # fmt: skip
    for r in result["ramp"]:
        print(f"  {r['at_s']:6.2f} s  count {r['was']} -> {r['count']}: {r['why'][:120]}")
    for j in result["judged"]:
        gain = f"{j['gain']:.2f}x {j['below']}'s" if j["gain"] is not None else "first measured"
        print(f"  {j['at_s']:6.2f} s  {j['level']} trial(s): {j['steps_per_s']:.1f} steps/s, "
              f"{gain}: {j['verdict']}")  # fmt: skip
    print(
        "  trials ended per second:",
        " ".join(str(w["trials_per_s"]) for w in result["ended_per_window"]),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--most", type=int, default=8, help="max_trials_per_gpu (fixed: the count)")
    parser.add_argument("--modes", default="auto,off,fixed", help="auto, off, fixed, fixedN")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="h200-main-job")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.trials, args.most, args.workload)))
        return
    results = {}
    for mode in args.modes.split(","):
        child = subprocess.run(
            [sys.executable, __file__, "--one", mode, "--trials", str(args.trials),
             "--most", str(args.most), "--workload", args.workload],
            capture_output=True, text=True, check=True, cwd=REPO,
        )  # fmt: skip
        results[mode] = summary(mode, json.loads(child.stdout.strip().splitlines()[-1]))
        show(results[mode])
    payload: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "device": "this machine's CPUs: real Ray, one logical GPU, simulated telemetry",
        "cpu_count": os.cpu_count(),
        "workload": args.workload,
        "trials": args.trials,
        "results": results,
    }
    if "auto" in results:
        payload["target_two_within_5s_of_first_end"] = results["auto"][
            "target_two_within_5s_of_first_end"
        ]
        for other in results:
            if other == "off" or other.startswith("fixed"):
                payload[f"{other}_over_auto"] = round(
                    results[other]["trials_s"] / results["auto"]["trials_s"], 3
                )
    named = "" if args.workload == "h200-main-job" else f"-{args.workload}"
    out = args.out or REPO / "benchmarks" / "results" / f"ramp-{payload['date']}-cpu{named}.json"
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
