"""The driver's cost per trial as a search grows: flat, or growing with the study?

A search of ``--trials`` trivial trials (one epoch of the simulated workload, a
few milliseconds each, on the simulated-time runner: no Ray, no sleeping), so
what is measured is the driver itself: Optuna's ask and tell (random sampler),
the ledger and its listeners, the MLflow child run of every trial, the budget and
the progress. Run with both stores (Optuna's and MLflow's) in SQLite files, and
both in PostgreSQL (a server of the ``pgserver`` wheel's binaries, started for
the run on 127.0.0.1), each search in a fresh process.

Per window of 1,000 trials (by completion order): wall seconds, driver CPU
seconds and the driver's SQL statements (``SELECT``) per trial, and the driver's
resident memory at the window's end. Where a process of its own writes the MLflow
runs (``tracking.writer``; ``--writer``, by default ``auto``: a process for
PostgreSQL, and for SQLite from 500 trials), its CPU seconds per trial are given beside the driver's
(``writer_cpu_ms_per_trial``), and its statements are not among the driver's.
Targets: the last window's wall time per trial within 1.2x the first's, memory
growth under 200 MB at 10,000 trials, and at most 30 ms of driver CPU per trial.

    python scripts/bench_scale.py                  # 1,000 and 10,000 trials, both stores
    python scripts/bench_scale.py --trials 1000 --stores sqlite
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
DRIVER_CPU_MS = 30
"""The driver's CPU per trial end that keeps up with 16 short trials at once (the issue
"Pack within seconds": 8-16 trials of 0.5 s end 16-32 a second)."""
WINDOW = int(os.environ.get("BENCH_SCALE_WINDOW", "1000"))
GROWTH_TARGET = 1.2
MEMORY_TARGET_MB = 200.0


@dataclass
class Tick:
    """One reading of the driver: when, its CPU seconds, its memory, statements so far, and
    its tracking writer's CPU seconds (``tracking.writer``: a process beside it)."""

    wall: float
    cpu: float
    rss_mb: float
    selects: int
    statements: int
    writer_cpu: float = 0.0


class Meter:
    """Reads the driver's CPU, memory and SQL statements every ``every`` seconds, in a thread."""

    def __init__(self, every: float = 0.25) -> None:
        import psutil
        import sqlalchemy

        self._process = psutil.Process()
        self._every = every
        self.ticks: list[Tick] = []
        self.selects = 0
        self.statements = 0
        self._stop = threading.Event()
        self._writers: dict[int, Any] = {}
        self._writer_cpu: dict[int, float] = {}

        def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            self.statements += 1
            if statement.lstrip().upper().startswith("SELECT"):
                self.selects += 1

        sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", count)
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def tick(self) -> Tick:
        times = self._process.cpu_times()
        return Tick(
            time.time(),
            times.user + times.system,
            self._process.memory_info().rss / 2**20,
            self.selects,
            self.statements,
            self._writers_cpu(),
        )

    def _writers_cpu(self) -> float:
        """CPU seconds of the driver's tracking writers so far (the last reading of one that
        ended)."""
        import psutil

        for child in self._process.children():
            if child.pid not in self._writers:
                try:
                    if "hpsearch.tracking._writer" in " ".join(child.cmdline()):
                        self._writers[child.pid] = child
                except psutil.Error:
                    continue
        for pid, writer in self._writers.items():
            try:
                times = writer.cpu_times()
            except psutil.Error:
                continue
            self._writer_cpu[pid] = times.user + times.system
        return sum(self._writer_cpu.values())

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            self.ticks.append(self.tick())

    def __enter__(self) -> Meter:
        self.ticks.append(self.tick())
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.ticks.append(self.tick())


def _at(ticks: list[Tick], when: float) -> Tick:
    """The reading nearest ``when``."""
    return min(ticks, key=lambda t: abs(t.wall - when))


def one_search(trials: int, storage: str, tracking: str, writer: str) -> dict[str, Any]:
    """Run the search here (a fresh process); its figures per window."""
    from rich.console import Console

    import hpsearch
    from hpsearch.runner import SimulatedRunner

    config = {
        "study": {
            "name": "scale",
            "n_trials": trials,
            "storage": storage,
            "sampler": {"type": "random", "seed": 0},
        },
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "train": "hpsearch.workloads.simulated_gpu:train",
        "space": {
            "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
            "epochs": 1,
            "steps_per_epoch": 1,
        },
        "execution": {"max_concurrent": 4, "num_cpus": 4, "num_gpus": 0},
        "telemetry": {"backend": "off"},
        "tracking": {"uri": tracking, "writer": writer},
    }
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        Path("bench.yaml").write_text(yaml.safe_dump(config))
        with Meter() as meter:
            started = time.time()
            outcome = hpsearch.run(
                "bench.yaml", console=Console(file=io.StringIO()), runner=SimulatedRunner()
            )
            ended = time.time()
        done = sorted(
            t.datetime_complete.timestamp()
            for t in outcome.results.study.get_trials(deepcopy=False)
            if t.datetime_complete is not None
        )
    windows = []
    edges = [started, *done[WINDOW - 1 :: WINDOW]]
    for first, last in itertools.pairwise(edges):
        a, b = _at(meter.ticks, first), _at(meter.ticks, last)
        windows.append(
            {
                "trials": WINDOW,
                "wall_ms_per_trial": round((last - first) / WINDOW * 1000, 2),
                "cpu_ms_per_trial": round((b.cpu - a.cpu) / WINDOW * 1000, 2),
                "writer_cpu_ms_per_trial": round((b.writer_cpu - a.writer_cpu) / WINDOW * 1000, 2),
                "selects_per_trial": round((b.selects - a.selects) / WINDOW, 1),
                "statements_per_trial": round((b.statements - a.statements) / WINDOW, 1),
                "rss_mb_at_end": round(b.rss_mb, 1),
            }
        )
    first_window, last_window = windows[0], windows[-1]
    growth = last_window["wall_ms_per_trial"] / first_window["wall_ms_per_trial"]
    # From the end of the first window (imports and caches warm) to the run's peak,
    # the end-of-search analysis included.
    after_first = _at(meter.ticks, edges[1]).rss_mb
    peak = max(t.rss_mb for t in meter.ticks)
    memory_growth = peak - after_first
    return {
        "trials": trials,
        "writer": writer,
        "completed": len(done),
        "wall_s": round(ended - started, 1),
        "windows": windows,
        "last_over_first": round(growth, 3),
        "rss_mb_after_first_window": round(after_first, 1),
        "rss_mb_peak": round(peak, 1),
        "rss_mb_at_exit": round(meter.ticks[-1].rss_mb, 1),
        "memory_growth_mb": round(memory_growth, 1),
        "targets": {
            f"last 1,000 within {GROWTH_TARGET}x of first": growth <= GROWTH_TARGET,
            f"memory growth under {MEMORY_TARGET_MB:.0f} MB": memory_growth < MEMORY_TARGET_MB,
        },
    }


def _postgres(folder: Path) -> Any:
    sys.path.insert(0, str(REPO))
    from tests.cluster.conftest import Postgres

    return Postgres(folder)


def _medians(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per store and size, the median of its runs' figures, and the targets on them."""
    medians = []
    for (store, trials), grouped in itertools.groupby(
        sorted(results, key=lambda r: (r["store"], r["trials"])),
        key=lambda r: (r["store"], r["trials"]),
    ):
        runs = list(grouped)
        ratio = statistics.median(r["last_over_first"] for r in runs)
        growth = statistics.median(r["memory_growth_mb"] for r in runs)
        cpu = statistics.median(
            statistics.median(w["cpu_ms_per_trial"] for w in r["windows"]) for r in runs
        )
        writer_cpu = statistics.median(
            statistics.median(w["writer_cpu_ms_per_trial"] for w in r["windows"]) for r in runs
        )
        medians.append(
            {
                "store": store,
                "trials": trials,
                "runs": len(runs),
                "last_over_first": ratio,
                "memory_growth_mb": growth,
                "cpu_ms_per_trial": round(cpu, 2),
                "writer_cpu_ms_per_trial": round(writer_cpu, 2),
                "wall_s": statistics.median(r["wall_s"] for r in runs),
                "targets": {
                    "last 1,000 within 1.2x of first": ratio <= 1.2,
                    "memory growth under 200 MB": growth < 200,
                    f"driver CPU {DRIVER_CPU_MS} ms per trial at most": cpu <= DRIVER_CPU_MS,
                },
            }
        )
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--stores", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)  # trials, stores, writer
    parser.add_argument(
        "--writer",
        choices=["auto", "process", "driver"],
        default="auto",
        help="tracking.writer: who writes the MLflow runs (auto: a process for PostgreSQL, "
        "and for SQLite from 500 trials)",
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each search; the file adds their medians"
    )
    args = parser.parse_args()
    if args.one:  # a child: one search, its figures as JSON on stdout's last line
        print(json.dumps(one_search(int(args.one[0]), *args.one[1:])))
        return

    results: list[dict[str, Any]] = []
    server = None
    folder = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    try:
        for store, trials, run in itertools.product(
            args.stores, args.trials, range(1, args.repeat + 1)
        ):
            if store == "sqlite":
                url, tracking = "sqlite:///mlruns/optuna.db", "sqlite:///mlruns/mlflow.db"
            else:
                server = server or _postgres(folder)
                url, tracking = server.create_database("scale"), server.create_database("runs")
            print(f"{store}: {trials} trials, run {run} ...", flush=True)
            child = subprocess.run(
                [sys.executable, __file__, "--one", str(trials), url, tracking, args.writer],
                capture_output=True,
                text=True,
                check=False,
                cwd=REPO,
            )
            if child.returncode != 0:
                raise SystemExit(child.stderr[-3000:])
            figures = json.loads(child.stdout.strip().splitlines()[-1])
            figures["store"], figures["run"] = store, run
            results.append(figures)
            print(json.dumps(figures, indent=1), flush=True)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(folder, ignore_errors=True)  # the server's data: 90 MB a run
    out = args.out or REPO / "benchmarks/results" / f"scale-{time.strftime('%Y-%m-%d')}.json"
    out.write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "machine": f"{platform.node()} ({os.cpu_count()} CPUs)",
                "python": platform.python_version(),
                "runner": "simulated time (no Ray): the driver's own cost",
                "sampler": "random (TPE's own model cost grows with the study, as in Optuna)",
                "stores": "sqlite: both stores SQLite files; postgresql: both in PostgreSQL",
                "results": results,
                "medians": _medians(results) if args.repeat > 1 else [],
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
