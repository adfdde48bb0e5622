"""What an Optuna objective's ``suggest_*`` costs in a hpsearch worker: over the driver's
gRPC storage proxy, against the same storage opened directly.

``train: {optuna: ...}`` runs an objective on a live trial of the driver's study,
reached through Optuna's ``GrpcStorageProxy`` (``hpsearch.study.serve_study``).
This times, per suggest call (median of ``--trials`` trials of ``--params``
suggests each, TPE after 10 random trials), the proxy in front of a SQLite
study, the SQLite study opened in the worker itself, and an in-memory study (the
floor: no storage round trip), plus the trial's set-up (load the study, build
the trial) over the proxy.

    python scripts/bench_suggest.py   # benchmarks/results/suggest-<date>-cpu.json
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from bench_oom import write_with_targets  # scripts/ is on the path when a script runs

REPO = Path(__file__).resolve().parents[1]


def _objective(params: int) -> Callable[[optuna.Trial], float]:
    def objective(trial: optuna.Trial) -> float:
        return sum(trial.suggest_float(f"x{i}", 0.0, 1.0) for i in range(params))

    return objective


def _timed_trials(
    study: optuna.Study, storage: Any, trials: int, params: int
) -> tuple[list[float], list[float]]:
    """Per trial: seconds per suggest, and the trial's set-up (as a worker builds it)."""
    per_suggest, setups = [], []
    copied = pickle.loads(pickle.dumps(study.sampler))  # the worker's copy, as hpsearch sends it
    for _ in range(trials):
        asked = study.ask()  # the driver asks
        started = time.perf_counter()
        worker_study = optuna.load_study(
            study_name=study.study_name, storage=storage, sampler=copied
        )
        trial = optuna.Trial(worker_study, asked._trial_id)
        setup = time.perf_counter() - started
        started = time.perf_counter()
        value = _objective(params)(trial)
        per_suggest.append((time.perf_counter() - started) / params)
        setups.append(setup)
        study.tell(asked, value)
    return per_suggest, setups


def _sampler() -> optuna.samplers.BaseSampler:
    return optuna.samplers.TPESampler(seed=0, n_startup_trials=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--params", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    from optuna.storages import GrpcStorageProxy

    from hpsearch.study import serve_study

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'optuna.db'}"
        for name in ("grpc_proxy_sqlite", "sqlite_direct", "in_memory"):
            storage: Any
            if name == "in_memory":
                study = optuna.create_study(study_name=name, sampler=_sampler())
                storage = study._storage
                per_suggest, setups = _timed_trials(study, storage, args.trials, args.params)
            elif name == "sqlite_direct":
                study = optuna.create_study(study_name=name, storage=url, sampler=_sampler())
                per_suggest, setups = _timed_trials(study, url, args.trials, args.params)
            else:
                study = optuna.create_study(study_name=name, storage=url, sampler=_sampler())
                with serve_study(study, "127.0.0.1") as address:
                    host, _, port = address.rpartition(":")
                    storage = GrpcStorageProxy(host=host, port=int(port))
                    per_suggest, setups = _timed_trials(study, storage, args.trials, args.params)
                    storage.close()
            results[name] = {
                "ms_per_suggest_median": round(1000 * statistics.median(per_suggest), 3),
                "ms_per_suggest_max": round(1000 * max(per_suggest), 3),
                "ms_trial_setup_median": round(1000 * statistics.median(setups), 3),
            }
            print(name, results[name], flush=True)
    proxy = results["grpc_proxy_sqlite"]["ms_per_suggest_median"]
    direct = results["sqlite_direct"]["ms_per_suggest_median"]
    results["grpc_proxy_sqlite"]["over_sqlite_direct"] = round(proxy / direct, 2)
    payload = {
        "date": time.strftime("%Y-%m-%d"),
        "device": "this machine's CPU",
        "cpu_count": os.cpu_count(),
        "trials": args.trials,
        "suggests_per_trial": args.params,
        "results": results,
    }
    today = time.strftime("%Y-%m-%d")
    write_with_targets(
        args.out or REPO / "benchmarks" / "results" / f"suggest-{today}-cpu.json", payload
    )


if __name__ == "__main__":
    main()
