"""The speed a trial reports is its own: a packed search's Pareto front against the unpacked one.

Runs the same accuracy-against-speed search (the packing lab's mixed workload:
sizes, so utilisation and speed, grow with the sampled width and batch) in
simulated time, once unpacked (``packing: off``) and packed (``auto`` and a
fixed count), with a random sampler whose suggestions do not depend on the
order trials finish in, so trial *k* has the same parameters in every mode.

For each packed mode it compares, trial by trial, with the unpacked run:

* the measured ``samples_per_sec`` (what the trial saw, its neighbours' load
  included) and the speed objective (its solo equivalent), as relative errors;
* the Pareto front (trial numbers) computed from each against the unpacked
  front.

With ``--readings-only`` the trials' declared loads still drive the simulated
GPU, but the solo speed is worked out as on a real GPU, from the utilisation
readings alone (NVML says nothing of each trial's load): the test of the
estimate, not only of the plumbing.

Targets: the front from the speed objective is the unpacked front (speeds
compared to three significant figures), and its speeds are within noise (the
median relative error under 2%).

    python scripts/bench_solo_speed.py   # benchmarks/results/solo-speed-<date>-simulated.json
    python scripts/bench_solo_speed.py --readings-only   # ...-simulated-readings.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench_oom import result_path, write_with_targets  # scripts/ is on the path when a script runs
from bench_packing import lab_config

from hpsearch import attrs
from hpsearch.results import dominates

SPEED = "samples_per_sec"


def search(mode: str, trials: int, gpus: int) -> tuple[dict[int, dict[str, Any]], float]:
    """Run the lab's mixed search packed per ``mode``: each completed trial's figures by
    number, and the simulated time it took."""
    import io
    import tempfile

    import yaml
    from rich.console import Console

    import hpsearch
    from hpsearch.runner import SimulatedRunner
    from hpsearch.tracking import MemoryTracker

    config = lab_config("mixed", mode, trials, gpus)
    config["study"]["name"] = f"solo-speed-{mode}"
    config["study"]["sampler"] = {"type": "random", "seed": 0}
    del config["objective"]
    config["objectives"] = [
        {"metric": "val_accuracy", "direction": "maximize"},
        {"metric": SPEED, "direction": "maximize"},
    ]
    scratch = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=scratch) as folder:
        previous = os.getcwd()
        os.chdir(folder)
        try:
            path = Path(folder) / "bench.yaml"
            path.write_text(yaml.safe_dump(config))
            outcome = hpsearch.run(
                path,
                console=Console(file=io.StringIO()),
                runner=SimulatedRunner(),
                tracker=MemoryTracker(),  # the lab's runs, as bench_packing keeps them
            )
        finally:
            os.chdir(previous)
    figures: dict[int, dict[str, Any]] = {}
    for trial in outcome.results.study.trials:
        if trial.state.name != "COMPLETE" or trial.values is None:
            continue
        metrics = trial.user_attrs[attrs.METRICS]
        figures[trial.number] = {
            "params": trial.params,
            "accuracy": trial.values[0],
            "solo": trial.values[1],
            "measured": metrics[SPEED],
            "speed_share": metrics.get("gpu_speed_share"),
        }
    return figures, round(outcome.elapsed_s, 1)


def _noise(value: float) -> float:
    """``value`` to three significant figures: speeds this close are the same speed."""
    return float(f"{value:.3g}")


def front(points: dict[int, tuple[float, float]]) -> list[int]:
    """Trial numbers on the (maximise, maximise) Pareto front, speeds compared within noise."""
    directions = ["maximize", "maximize"]
    points = {n: (accuracy, _noise(speed)) for n, (accuracy, speed) in points.items()}
    return sorted(
        n
        for n, p in points.items()
        if not any(dominates(q, p, directions) for m, q in points.items() if m != n)
    )


def compare(alone: dict[int, dict[str, Any]], packed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """How the packed run's speeds and fronts differ from the unpacked run's."""
    common = sorted(set(alone) & set(packed))
    solo_err = [abs(packed[n]["solo"] / alone[n]["solo"] - 1) for n in common]
    raw_err = [abs(packed[n]["measured"] / alone[n]["measured"] - 1) for n in common]
    reference = front({n: (alone[n]["accuracy"], alone[n]["solo"]) for n in common})
    by_solo = front({n: (packed[n]["accuracy"], packed[n]["solo"]) for n in common})
    by_raw = front({n: (packed[n]["accuracy"], packed[n]["measured"]) for n in common})
    shared = [n for n in common if (packed[n]["speed_share"] or 1.0) < 0.999]
    return {
        "trials_compared": len(common),
        "trials_slowed_by_sharing": len(shared),
        "measured_speed_error_median": round(statistics.median(raw_err), 4),
        "measured_speed_error_max": round(max(raw_err), 4),
        "solo_speed_error_median": round(statistics.median(solo_err), 4),
        "solo_speed_error_max": round(max(solo_err), 4),
        "front_unpacked": reference,
        "front_from_solo_speed": by_solo,
        "front_from_measured_speed": by_raw,
        "front_from_measured_matches": by_raw == reference,
        "target_front_matches": by_solo == reference,
        "target_solo_within_noise": statistics.median(solo_err) < 0.02,
    }


def readings_only() -> None:
    """Make the search's per-trial GPU metrics forget what trials declare (as NVML would)."""
    from hpsearch.telemetry import GpuLoad, TrialGpuMetrics

    declared = TrialGpuMetrics.declared_load

    def to_the_gpu_only(self: TrialGpuMetrics, number: int, load: GpuLoad) -> None:
        # The GPU shows it.
        declared(self, number, load)
        placement = self._trials.get(number)
        if placement is not None:
            placement.load = None

    TrialGpuMetrics.declared_load = to_the_gpu_only  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--modes", default="auto,fixed4", help="packed modes against off")
    parser.add_argument(
        "--readings-only", action="store_true", help="work out solo speeds from readings alone"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.readings_only:
        readings_only()
    alone, alone_s = search("off", args.trials, args.gpus)
    print("off", {"time_to_budget_s": alone_s}, flush=True)
    results: dict[str, Any] = {}
    for mode in args.modes.split(","):
        packed, packed_s = search(mode, args.trials, args.gpus)
        results[mode] = {"time_to_budget_s": packed_s, **compare(alone, packed)}
        print(mode, results[mode], flush=True)
    payload = {
        "date": time.strftime("%Y-%m-%d"),
        "device": "the packing lab: simulated GPUs that slow trials sharing them, simulated time",
        "workload": "the lab's mixed workload, random sampler seed 0",
        "objectives": ["val_accuracy", SPEED],
        "solo_speed_from": "utilisation readings alone"
        if args.readings_only
        else "the trials' declared loads",
        "trials": args.trials,
        "gpus": args.gpus,
        "off_time_to_budget_s": alone_s,
        "results": results,
    }
    suffix = "-readings" if args.readings_only else ""
    write_with_targets(args.out or result_path("solo-speed", None, suffix), payload)


if __name__ == "__main__":
    main()
