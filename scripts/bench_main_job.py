"""The main job on a GPU: packing auto against off, to the same budget, with the GPU read beside.

Runs a config (``configs/phase1-gpu.yaml`` by default) twice, each in a fresh folder
and process: ``packing.mode: auto`` and ``off``. For each: the time to the budget (the
search's own clock), the best ``val_accuracy``, the trials that ended, and what the
GPU did meanwhile, sampled every 0.2 s by a thread of this script (NVML's
utilisation, and GPM SM activity where the GPU has it; a line every ten samples).

Targets (the "Pack within seconds" issue): ``auto`` at least 4x sooner than ``off``,
its best accuracy within one point of ``off``'s.

    python scripts/bench_main_job.py                  # an NVIDIA GPU
    python scripts/bench_main_job.py --config configs/phase1.yaml --trials 4   # CPU: plumbing
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
SAMPLE_S = 0.2
SPEEDUP_TARGET = 4.0
ACCURACY_POINTS = 0.01


class GpuReadings:
    """NVML's utilisation (and GPM SM activity where it works) of GPU 0, in a thread."""

    def __init__(self) -> None:
        self.utilization: list[float] = []
        self.sm_activity: list[float] = []
        self.why_not = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> GpuReadings:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception as exc:  # no GPU here: the CPU run's case
            self.why_not = f"NVML unavailable: {exc}"
            return
        from hpsearch.telemetry import GpmReader, gpm_supported

        reader = GpmReader(pynvml, handle) if gpm_supported(pynvml, handle) else None
        try:
            while not self._stop.wait(SAMPLE_S):
                self.utilization.append(float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
                if reader is not None:
                    self.sm_activity.append(reader.read().sm_util_pct)
                if len(self.utilization) % 10 == 0:
                    sm = f", SM {self.sm_activity[-1]:.1f}%" if self.sm_activity else ""
                    print(f"  gpu {self.utilization[-1]:.0f}% busy{sm}", flush=True)
        finally:
            if reader is not None:
                reader.close()
            pynvml.nvmlShutdown()

    def summary(self) -> dict[str, Any]:
        def stats(values: list[float]) -> dict[str, float] | None:
            if not values:
                return None
            return {"mean": round(statistics.fmean(values), 1), "max": round(max(values), 1)}

        return {
            "samples": len(self.utilization),
            "utilization_pct": stats(self.utilization),
            "gpm_sm_activity_pct": stats(self.sm_activity),
            **({"why_not": self.why_not} if self.why_not else {}),
        }


def one(config_path: Path, mode: str, trials: int | None) -> dict[str, Any]:
    """Run the search here (a fresh process) with ``packing.mode: mode``; its figures."""
    import hpsearch

    config = yaml.safe_load(config_path.read_text())
    config.setdefault("packing", {})["mode"] = mode
    config["study"]["name"] = f"{config['study']['name']}-{mode}"
    if trials is not None:
        config["study"]["n_trials"] = trials
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        Path("main.yaml").write_text(yaml.safe_dump(config))
        with GpuReadings() as gpu:
            outcome = hpsearch.run("main.yaml")
        trials_done = outcome.results.study.trials
        ramp = {**packing_ramp(Path(folder)), **mps_said(outcome)}
    values = [t.values[0] for t in trials_done if t.values]
    return {
        "time_to_budget_s": round(outcome.elapsed_s, 1),
        "trials": len(trials_done),
        "complete": sum(t.state.name == "COMPLETE" for t in trials_done),
        "pruned": sum(t.state.name == "PRUNED" for t in trials_done),
        "best_val_accuracy": max(values, default=None),
        "gpu": gpu.summary(),
        "packing": ramp,
    }


def mps_said(outcome: Any) -> dict[str, Any]:
    """What MPS did in the search (the parent run's ``hpsearch.mps`` tag) and how many of
    its trials ran as MPS clients (their runs' tag), read from the MLflow store here."""
    import mlflow

    from hpsearch.config import load_config

    if outcome.mlflow_parent_run_id is None:
        return {}
    client = mlflow.MlflowClient(tracking_uri=load_config("main.yaml").tracking.uri)
    tags = client.get_run(outcome.mlflow_parent_run_id).data.tags
    clients = client.search_runs(
        [outcome.mlflow_experiment_id], filter_string="tags.`hpsearch.mps` = 'on'"
    )
    return {"mps_detail": tags.get("hpsearch.mps"), "trials_as_mps_clients": len(clients)}


def packing_ramp(folder: Path, keep: int = 24) -> dict[str, Any]:
    """What packing decided in the search run under ``folder`` (its MLflow artifact
    ``packing_decisions.json``): the highest count of trial processes per GPU, whether
    MPS was judged, and the first ``keep`` decisions (time, count, reason)."""
    found = sorted(folder.rglob("packing_decisions.json"))
    if not found:
        return {"decisions": 0}
    decisions = json.loads(found[-1].read_text(encoding="utf-8"))
    placed = [d for d in decisions if d.get("decides") == "processes"]
    began = float(placed[0].get("time") or 0.0) if placed else 0.0
    return {
        "decisions": len(decisions),
        "max_processes_per_gpu": max((int(d["limit"]) for d in placed), default=None),
        "mps": [d["mps"] for d in placed if "mps" in d],
        "first": [
            {
                "t_s": round(float(d.get("time") or 0.0) - began, 2),
                "limit": d["limit"],
                "running": d.get("running"),
                "reason": d.get("reason"),
            }
            for d in placed[:keep]
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "phase1-gpu.yaml")
    parser.add_argument("--trials", type=int, help="n_trials (default: the config's)")
    parser.add_argument("--modes", default="auto,off")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.config.resolve(), args.one, args.trials)))
        return
    results: dict[str, Any] = {}
    for mode in args.modes.split(","):
        command = [sys.executable, __file__, "--one", mode, "--config", str(args.config.resolve())]
        if args.trials is not None:
            command += ["--trials", str(args.trials)]
        print(f"{mode}:", flush=True)
        child = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True, cwd=REPO)
        results[mode] = json.loads(child.stdout.strip().splitlines()[-1])
        print(f"{mode}: {json.dumps(results[mode])}", flush=True)
    verdict: dict[str, Any] = {}
    if {"auto", "off"} <= set(results):
        auto, off = results["auto"], results["off"]
        verdict["off_over_auto"] = round(off["time_to_budget_s"] / auto["time_to_budget_s"], 3)
        verdict[f"target_auto_{SPEEDUP_TARGET:g}x_sooner"] = (
            verdict["off_over_auto"] >= SPEEDUP_TARGET
        )
        if auto["best_val_accuracy"] is not None and off["best_val_accuracy"] is not None:
            gap = off["best_val_accuracy"] - auto["best_val_accuracy"]
            verdict["accuracy_gap"] = round(gap, 4)
            verdict["target_best_accuracy_within_one_point"] = gap <= ACCURACY_POINTS
    from bench_oom import gpu_name, result_path, write_with_targets  # scripts/ is on the path

    device = (
        gpu_name() if results and "why_not" not in next(iter(results.values()))["gpu"] else None
    )
    payload = {
        "date": time.strftime("%Y-%m-%d"),
        "device": device or "CPU (no GPU: the plumbing only)",
        "config": str(args.config),
        "results": {"main-job": {**results, **verdict}},
    }
    write_with_targets(
        args.out or result_path("main-job", device, "" if device else "-cpu"), payload
    )


if __name__ == "__main__":
    main()
