"""How long ``hpsearch run`` takes to exit once its last trial has ended.

Runs ``python -m hpsearch run CONFIG`` in a fresh folder, reading its output as it
comes, and times three moments: the last trial's end (the study's latest
``datetime_complete``), the progress view's end (the "finished N trial(s) this run"
line the command prints right after it), and the process's exit. Target (the
"First contact" issue): exit within 10 s of the last trial's end.

    python scripts/bench_exit.py                                   # configs/debug.yaml, 3 runs
    python scripts/bench_exit.py --config configs/phase1.yaml --trials 8 --repeat 1
    python scripts/bench_exit.py --label "after, 2 busy cores"   # a case beside the others

The code measured is the one ``python -m hpsearch`` imports with this repository
first on ``PYTHONPATH``: run the script of another checkout to measure that one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
import yaml

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 10.0
VIEW_ENDED = "finished "
"""The start of the line ``hpsearch run`` prints once its progress view has ended."""


def one(config_path: Path, trials: int | None) -> dict[str, Any]:
    """One run in a fresh folder: the three moments, as seconds after the last trial's end."""
    config = yaml.safe_load(config_path.read_text())
    if trials is not None:
        config["study"]["n_trials"] = trials
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "run.yaml").write_text(yaml.safe_dump(config))
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        started = time.time()
        process = subprocess.Popen(
            [sys.executable, "-m", "hpsearch", "run", "run.yaml"],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        view_ended = None
        assert process.stdout is not None
        for line in process.stdout:
            if view_ended is None and line.startswith(VIEW_ENDED):
                view_ended = time.time()
        process.wait()
        exited = time.time()
        study = optuna.load_study(
            study_name=config["study"]["name"], storage=f"sqlite:///{folder}/mlruns/optuna.db"
        )
        ends = [t.datetime_complete.timestamp() for t in study.trials if t.datetime_complete]
    last = max(ends)
    return {
        "exit_code": process.returncode,
        "trials": len(ends),
        "wall_s": round(exited - started, 2),
        "view_ended_after_last_trial_s": round(view_ended - last, 2) if view_ended else None,
        "exit_after_last_trial_s": round(exited - last, 2),
        "exit_after_view_ended_s": round(exited - view_ended, 2) if view_ended else None,
    }


def write(out: Path, label: str, runs: list[dict[str, Any]], config: str) -> float:
    """Add (or replace) the case ``label`` in ``out``, keeping its other cases (the same
    file holds before and after, idle and loaded); the verdicts tallied over all cases.
    The median exit after the last trial's end."""
    median = float(statistics.median(r["exit_after_last_trial_s"] for r in runs))
    previous = json.loads(out.read_text()) if out.exists() else {}
    results = {
        **previous.get("results", {}),
        label: {
            "config": config,
            "runs": len(runs),
            "median_wall_s": round(statistics.median(r["wall_s"] for r in runs), 2),
            "median_exit_after_last_trial_s": median,
            "median_exit_after_view_ended_s": round(
                statistics.median(
                    r["exit_after_view_ended_s"]
                    for r in runs
                    if r["exit_after_view_ended_s"] is not None
                ),
                2,
            ),
            "target_exit_within_10_s": median <= TARGET_S,
            "each_run": runs,
        },
    }
    verdicts = {name: case["target_exit_within_10_s"] for name, case in results.items()}
    payload = {
        "benchmark": "exit after the last trial",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.node()} ({os.cpu_count()} CPUs)",
        "target": f"exit within {TARGET_S:g} s of the last trial's end",
        "results": results,
        "targets": len(verdicts),
        "targets_passed": sum(verdicts.values()),
        "missed": [name for name, passed in verdicts.items() if not passed],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n")
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "debug.yaml")
    parser.add_argument("--trials", type=int)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--label", default="idle", help="the case's name in the file (the code's commit, the load)"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    runs = []
    for index in range(args.repeat):
        runs.append(one(args.config.resolve(), args.trials))
        print(f"run {index + 1}: {json.dumps(runs[-1])}", flush=True)
    config = args.config.resolve()
    name = str(config.relative_to(REPO) if config.is_relative_to(REPO) else config)
    out = args.out or REPO / "benchmarks" / "results" / f"exit-{time.strftime('%Y-%m-%d')}-cpu.json"
    median = write(out, args.label, runs, name)
    print(f"{args.label}: median exit {median:.2f} s after the last trial's end; wrote {out}")


if __name__ == "__main__":
    main()
