"""Start-up of the ``hpsearch`` command as a user waits for it: whole-process wall time.

Times, over ``--runs`` runs each (median, min and max), in a fresh process:

* ``hpsearch --help`` (target ≤ 0.3 s);
* ``hpsearch validate configs/phase1.yaml`` (target ≤ 1.5 s), and whether it imported torch;
* ``hpsearch best`` and ``hpsearch trials`` on a finished 30-trial study (target ≤ 1.5 s
  each), made first with the simulated runner in a scratch folder.

``--source DIR`` times another checkout of hpsearch (its ``hpsearch`` package put
first on the path), for a before/after pair with the same interpreter and packages.

    python scripts/bench_startup.py   # benchmarks/results/startup-<date>-cpu.json
    python scripts/bench_startup.py --source /tmp/before --out /tmp/before.json
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
from bench_oom import write_with_targets  # scripts/ is on the path when a script runs

REPO = Path(__file__).resolve().parents[1]
TARGETS_S = {"help": 0.3, "validate": 1.5, "best": 1.5, "trials": 1.5}

STUDY: dict[str, Any] = {
    "study": {"name": "startup", "n_trials": 30, "sampler": {"type": "random", "seed": 0}},
    "objectives": [
        {"metric": "val_accuracy", "direction": "maximize"},
        {"metric": "samples_per_sec", "direction": "maximize"},
    ],
    "train": "hpsearch.workloads.simulated_gpu:train",
    "space": {
        "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
        "width": [64, 128, 256],
        "epochs": 3,
    },
    "telemetry": {"backend": "simulated"},
}


# Runs another checkout's command: an editable install's finder would otherwise
# answer `import hpsearch` with this one, whatever PYTHONPATH says.
_LAUNCH = (
    "import sys; sys.meta_path[:] = [f for f in sys.meta_path "
    "if 'editable' not in type(f).__module__]; sys.path.insert(0, sys.argv.pop(1)); "
    "sys.argv[0] = 'hpsearch'; from hpsearch.cli import main; main()"
)
_SOURCE: list[str] = []
"""``--source``, when given: the checkout whose ``hpsearch`` runs."""


def _command(args: list[str], *flags: str) -> list[str]:
    if _SOURCE:
        return [sys.executable, *flags, "-c", _LAUNCH, _SOURCE[0], *args]
    return [sys.executable, *flags, "-m", "hpsearch", *args]


def _hpsearch(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _command(args),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _timed(args: list[str], cwd: Path, env: dict[str, str], runs: int) -> dict[str, Any]:
    """Median, min and max wall seconds of ``hpsearch ARGS`` (one warm-up run first)."""
    _hpsearch(args, cwd, env)  # the page cache and .pyc files, as a user's second call
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = _hpsearch(args, cwd, env)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise RuntimeError(f"hpsearch {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return {
        "median_s": round(statistics.median(times), 3),
        "min_s": round(min(times), 3),
        "max_s": round(max(times), 3),
        "runs": runs,
    }


def _imports_torch(args: list[str], cwd: Path, env: dict[str, str]) -> bool:
    done = subprocess.run(
        _command(args, "-X", "importtime"),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return any(line.rstrip().endswith("| torch") for line in done.stderr.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--source", type=Path, help="another checkout's folder to time")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.source is not None:
        _SOURCE.append(str(args.source.resolve()))
    env = dict(os.environ)
    located = str(args.source.resolve() if args.source else REPO)
    results: dict[str, Any] = {}
    phase1 = REPO / "configs" / "phase1.yaml"
    results["help"] = _timed(["--help"], REPO, env, args.runs)
    results["validate"] = {
        **_timed(["validate", str(phase1)], REPO, env, args.runs),
        "imports_torch": _imports_torch(["validate", str(phase1)], REPO, env),
    }
    with tempfile.TemporaryDirectory() as folder:
        where = Path(folder)
        (where / "startup.yaml").write_text(yaml.safe_dump(STUDY))
        made = _hpsearch(["run", "startup.yaml", "--runner", "simulated"], where, env)
        if made.returncode != 0:
            raise RuntimeError(f"the study for best/trials: {made.stderr}")
        results["best"] = _timed(["best", "startup.yaml"], where, env, args.runs)
        results["trials"] = _timed(["trials", "startup.yaml"], where, env, args.runs)
    for name, limit in TARGETS_S.items():
        results[name][f"target_at_most_{limit}s"] = results[name]["median_s"] <= limit
    payload = {
        "date": time.strftime("%Y-%m-%d"),
        "device": "this machine's CPU",
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "hpsearch": located,
        "results": results,
    }
    out = (
        args.out
        or REPO / "benchmarks" / "results" / f"startup-{time.strftime('%Y-%m-%d')}-cpu.json"
    )
    write_with_targets(out, payload)
    print(json.dumps({k: v["median_s"] for k, v in results.items()}))


if __name__ == "__main__":
    main()
