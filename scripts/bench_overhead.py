"""Per-trial overhead of hpsearch, against Ray Tune with OptunaSearch and a plain Optuna loop.

The same budget each way: ``--trials`` trials of ``--sleep`` seconds, ``--concurrency``
at a time, on this machine's CPUs. Overhead per trial is the wall time beyond the
ideal (trials x sleep / concurrency), spread over the trials and slots. hpsearch
runs twice: reusing trial workers (the default) and starting one per trial.

Ray Tune runs twice too. ``ray_tune_default`` is Tune's defaults with a
``ConcurrencyLimiter``; ``ray_tune_fair`` is Tune as its own users configure it
for many short trials: ``reuse_actors=True``, ``tune.with_resources(fn, {"cpu":
1})``, and ``max_concurrent_trials``. The target compares hpsearch with the fair one.
``--profile`` runs hpsearch's driver under cProfile and keeps its top functions by
cumulative time (where the per-trial cost goes).

Each tool runs in a fresh process, and is timed as a user waits for it: ``wall_s``
from that process's start (its imports included) to the run's end (its Ray stopped),
``first_trial_s`` from the same start to the first trial's body running.
``run_wall_s`` is the time inside the run's call alone: it leaves out what a tool
imports before it is called (Ray Tune's ``ray.tune`` and ``OptunaSearch``, 0.8 s
here) but not what hpsearch imports when it is (its runner, MLflow), so it
is kept for reference only. (Up to 2026-11-27 ``wall_s`` was that inner time.)

``--gpus N`` is the packed case: N logical GPUs in the local Ray, each trial placed on
one. Ray Tune asks ``{"cpu": cpus, "gpu": 1/concurrency-per-GPU}``, as its users share
a GPU; hpsearch runs twice: ``packing: fixed`` at the same count (the like-for-like
run, the target's) and ``packing: auto`` over simulated GPUs the trials declare 2%
and 830 MiB on (the H200 main job's), which finds the count itself. ``--cpus-per-trial``
is each trial's CPU request in both.

    python scripts/bench_overhead.py     # benchmarks/results/overhead-<date>-60x0.5s-cpu.json
    python scripts/bench_overhead.py --trials 300 --sleep 0.1
    python scripts/bench_overhead.py --trials 48 --concurrency 8 --gpus 1 --cpus-per-trial 0.25

``--repeat N`` runs every tool N times, round after round, and keeps each one's
median wall time (its runs listed): one run's Ray Tune varied 12.6-14.3 s.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
PROCESS_START = time.time()
FIRST_TRIAL_FILE = "HPSEARCH_BENCH_FIRST_TRIAL"
"""The environment variable naming the file the first trial to run writes its time to."""


def _mark_first_trial() -> None:
    """Write the time to the file, if no trial wrote it before (the first one wins)."""
    path = os.environ.get(FIRST_TRIAL_FILE)
    if not path:
        return
    try:
        with open(path, "x") as file:
            file.write(str(time.time()))
    except FileExistsError:
        pass


def sleep_trial(params: dict[str, Any], ctx: Any) -> None:
    """The benchmark's trial for hpsearch: sleep, report (declaring the H200 main job's GPU
    load where the GPUs are simulated, for ``packing: auto`` to measure)."""
    _mark_first_trial()
    if params.get("declare_load"):
        ctx.simulate_gpu_load(2.0, 830.0, cpus=0.1)
    time.sleep(float(params["sleep"]))
    ctx.report(0, score=float(params["x"]))


@dataclass(frozen=True)
class Packed:
    """The packed case: logical GPUs, each trial's CPU request, and hpsearch's packing mode."""

    gpus: int
    cpus_per_trial: float
    mode: str = "fixed"


def run_hpsearch(
    trials: int, sleep: float, concurrency: int, reuse: bool, packed: Packed | None = None
) -> float:
    """Wall seconds of ``hpsearch.run`` for the budget (Ray start included)."""
    import hpsearch

    config: dict[str, Any] = {
        "study": {"name": f"overhead-{reuse}", "sampler": {"type": "random", "seed": 0}},
        "objective": {"metric": "score", "direction": "maximize"},
        "train": "bench_overhead:sleep_trial",
        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}, "sleep": sleep},
        "execution": {"max_concurrent": concurrency, "reuse_workers": reuse},
    }
    if packed is not None:
        per_gpu = max(1, concurrency // packed.gpus)
        config["execution"].update(num_gpus=packed.gpus, cpus_per_trial=packed.cpus_per_trial)
        if packed.mode == "fixed":
            config["packing"] = {"mode": "fixed", "trials_per_gpu": per_gpu}
            config["telemetry"] = {"backend": "off"}
        else:
            config["space"]["declare_load"] = True
            config["packing"] = {"mode": "auto", "max_trials_per_gpu": per_gpu}
            config["telemetry"] = {
                "backend": "simulated",
                "simulated": {
                    "gpus": packed.gpus,
                    "name": "Simulated NVIDIA H200",
                    "memory_total_mb": 143771.0,
                },
            }
            del config["execution"]["num_gpus"]  # one logical GPU per simulated one
    config["study"]["n_trials"] = trials
    with tempfile.TemporaryDirectory() as folder:
        previous = Path.cwd()
        os.chdir(folder)
        try:
            Path("bench.yaml").write_text(yaml.safe_dump(config))
            started = time.perf_counter()
            outcome = hpsearch.run("bench.yaml")
            wall = time.perf_counter() - started
        finally:
            os.chdir(previous)
    assert outcome.finished == trials, outcome
    return wall


def run_ray_tune(
    trials: int, sleep: float, concurrency: int, fair: bool = False, packed: Packed | None = None
) -> float:
    """Wall seconds of Ray Tune with OptunaSearch for the budget (Ray start included).

    Args:
        fair: configured as a Ray user would for short trials (actors reused, one CPU
            per trial, Tune's own concurrency cap); otherwise Tune's defaults.
        packed: logical GPUs, each trial asking its share of one (``fair`` only).
    """
    import optuna
    import ray
    from ray import tune
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    def trainable(config: dict[str, Any]) -> None:
        _mark_first_trial()
        time.sleep(sleep)
        tune.report({"score": config["x"]})

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    started = time.perf_counter()
    from hpsearch._compat import LOOPBACK_RAY_INIT, ray_on_loopback_only

    # The same set-up as hpsearch's own local Ray: a Ray of its own (not one `ray start`
    # left running), its servers on 127.0.0.1.
    with ray_on_loopback_only():
        ray.init(
            address="local",
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
            num_gpus=packed.gpus if packed is not None else None,
            **LOOPBACK_RAY_INIT,
        )
    try:
        searcher = ConcurrencyLimiter(
            OptunaSearch(
                {"x": optuna.distributions.FloatDistribution(0.0, 1.0)},
                metric="score",
                mode="max",
                sampler=optuna.samplers.RandomSampler(seed=0),
            ),
            max_concurrent=concurrency,
        )
        with tempfile.TemporaryDirectory() as folder:
            tune_config = tune.TuneConfig(search_alg=searcher, num_samples=trials)
            function: Any = trainable
            if fair:
                tune_config = tune.TuneConfig(
                    search_alg=searcher,
                    num_samples=trials,
                    reuse_actors=True,
                    max_concurrent_trials=concurrency,
                )
                request: dict[str, float] = {"cpu": 1}
                if packed is not None:
                    per_gpu = max(1, concurrency // packed.gpus)
                    request = {"cpu": packed.cpus_per_trial, "gpu": 1 / per_gpu}
                function = tune.with_resources(trainable, request)
            tuner = tune.Tuner(
                function,
                tune_config=tune_config,
                run_config=tune.RunConfig(storage_path=folder, verbose=0),
            )
            results = tuner.fit()
    finally:
        ray.shutdown()
    wall = time.perf_counter() - started
    assert len(results) == trials
    return wall


def run_optuna(trials: int, sleep: float, concurrency: int) -> float:
    """Wall seconds of ``Study.optimize(n_jobs=concurrency)`` in one process, in memory."""
    import optuna

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        _mark_first_trial()
        time.sleep(sleep)
        return x

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    started = time.perf_counter()
    study.optimize(objective, n_trials=trials, n_jobs=concurrency)
    return time.perf_counter() - started


def _profiled(run: Callable[[], float]) -> tuple[float, list[dict[str, Any]]]:
    """``run()`` under cProfile: its wall time and the driver's top functions by cumulative
    and by own time (the trials run in other processes, so this is the driver alone)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    wall = profiler.runcall(run)
    stats = pstats.Stats(profiler)
    rows = []
    for (file, line, function), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "function": f"{Path(file).name}:{line}:{function}",
                "calls": calls,
                "own_s": round(own, 3),
                "cumulative_s": round(cumulative, 3),
            }
        )
    by_cumulative = sorted(rows, key=lambda row: -float(row["cumulative_s"]))[:30]
    by_own = sorted(rows, key=lambda row: -float(row["own_s"]))[:15]
    return wall, [{"by_cumulative": by_cumulative, "by_own": by_own}]


def _runs(args: argparse.Namespace) -> dict[str, Callable[[], float]]:
    """What is run, by name: the CPU case's tools, or the packed case's."""
    budget = (args.trials, args.sleep, args.concurrency)
    if args.gpus:
        fixed = Packed(args.gpus, args.cpus_per_trial)
        auto = Packed(args.gpus, args.cpus_per_trial, mode="auto")
        return {
            "hpsearch": lambda: run_hpsearch(*budget, reuse=True, packed=fixed),
            "hpsearch_auto": lambda: run_hpsearch(*budget, reuse=True, packed=auto),
            "ray_tune_fair": lambda: run_ray_tune(*budget, fair=True, packed=fixed),
        }
    return {
        "hpsearch": lambda: run_hpsearch(*budget, reuse=True),
        "hpsearch_no_reuse": lambda: run_hpsearch(*budget, reuse=False),
        "ray_tune_default": lambda: run_ray_tune(*budget),
        "ray_tune_fair": lambda: run_ray_tune(*budget, fair=True),
        "optuna_n_jobs": lambda: run_optuna(*budget),
    }


def _child(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One tool's run in a fresh process: its wall time, first trial and profile."""
    child = subprocess.run(
        [
            sys.executable,
            __file__,
            "--one",
            name,
            *("--trials", str(args.trials), "--sleep", str(args.sleep)),
            *("--gpus", str(args.gpus), "--cpus-per-trial", str(args.cpus_per_trial)),
            *("--concurrency", str(args.concurrency)),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    measured: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return measured


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--sleep", type=float, default=0.5)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--only", nargs="*", default=None, help="run only these (names below)")
    parser.add_argument("--profile", action="store_true", help="also profile hpsearch's driver")
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of every tool; the file keeps medians"
    )
    parser.add_argument("--gpus", type=int, default=0, help="logical GPUs: the packed case")
    parser.add_argument("--cpus-per-trial", type=float, default=1.0)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a child's run
    return parser.parse_args()


def main() -> None:
    args = _arguments()

    # Trial workers import the trial function from this folder.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")])
    )
    sys.path.insert(0, str(Path(__file__).parent))
    runs = _runs(args)
    if args.one is not None:
        # One tool in a fresh process: no tool inherits another's Ray or imports.
        name, _, profiled = args.one.partition(":")
        marker = Path(tempfile.mkdtemp()) / "first-trial"
        os.environ[FIRST_TRIAL_FILE] = str(marker)  # the workers inherit it
        if profiled:
            inner, top = _profiled(runs[name])
        else:
            inner, top = runs[name](), []
        wall = time.time() - PROCESS_START
        first = float(marker.read_text()) - PROCESS_START
        print(
            json.dumps(
                {"wall_s": wall, "run_wall_s": inner, "first_trial_s": first, "profile": top}
            )
        )
        return

    ideal = args.trials * args.sleep / args.concurrency
    runs_of: dict[str, list[dict[str, Any]]] = {}
    profile: list[dict[str, Any]] = []
    names = [n for n in runs if args.only is None or n in args.only]
    for round_ in range(args.repeat):  # rounds of every tool: a slow minute hits them all
        for name in names + (["hpsearch:profiled"] if args.profile and round_ == 0 else []):
            measured = _child(name, args)
            label = name
            if name.endswith(":profiled"):
                profile, label = measured["profile"], "hpsearch_under_cprofile"
            wall, first = float(measured["wall_s"]), float(measured["first_trial_s"])
            inner = float(measured["run_wall_s"])
            runs_of.setdefault(label, []).append(
                {"wall_s": wall, "run_wall_s": inner, "first_trial_s": first}
            )
            print(
                f"{label:24s} wall {wall:7.1f} s (in the call {inner:5.1f} s)   overhead per "
                f"trial {(wall - ideal) * args.concurrency / args.trials:6.3f} s"
                f"   first trial at {first:5.1f} s",
                flush=True,
            )
    results: dict[str, dict[str, Any]] = {}
    for label, each in runs_of.items():
        wall = statistics.median(r["wall_s"] for r in each)
        results[label] = {
            "wall_s": round(wall, 2),
            "overhead_per_trial_s": round((wall - ideal) * args.concurrency / args.trials, 3),
            "first_trial_s": round(statistics.median(r["first_trial_s"] for r in each), 2),
            "run_wall_s": round(statistics.median(r["run_wall_s"] for r in each), 2),
        }
        if len(each) > 1:
            results[label]["runs_wall_s"] = [round(r["wall_s"], 2) for r in each]

    report = {
        "benchmark": "per-trial overhead",
        "date": time.strftime("%Y-%m-%d"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "gpu": None,
        },
        "trials": args.trials,
        "sleep_s": args.sleep,
        "concurrency": args.concurrency,
        "logical_gpus": args.gpus,
        "cpus_per_trial": args.cpus_per_trial if args.gpus else 1.0,
        "ideal_wall_s": ideal,
        "results": results,
        "hpsearch_vs_ray_tune_fair": (
            round(results["hpsearch"]["wall_s"] / results["ray_tune_fair"]["wall_s"], 2)
            if {"hpsearch", "ray_tune_fair"} <= set(results)
            else None
        ),
        "hpsearch_auto_vs_ray_tune_fair": (
            round(results["hpsearch_auto"]["wall_s"] / results["ray_tune_fair"]["wall_s"], 2)
            if {"hpsearch_auto", "ray_tune_fair"} <= set(results)
            else None
        ),
        "runs": args.repeat,
        "first_trial_hpsearch_vs_ray_tune_fair": (
            round(
                results["hpsearch"]["first_trial_s"] / results["ray_tune_fair"]["first_trial_s"], 2
            )
            if {"hpsearch", "ray_tune_fair"} <= set(results)
            else None
        ),
        "target": "hpsearch <= 1.0x ray_tune_fair at equal concurrency",
        "driver_profile": profile,
    }
    label_of_budget = f"{args.trials}x{args.sleep:g}s"
    if args.gpus:
        label_of_budget += f"-c{args.concurrency}-{args.gpus}gpu"
    out = (
        args.out
        or REPO / "benchmarks" / "results" / f"overhead-{report['date']}-{label_of_budget}-cpu.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
