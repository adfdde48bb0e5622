"""Packing judged by the time it saves: the packing lab in simulated time, or a real GPU.

The lab (the default) runs the same search (seed, trial budget) per workload and
per packing mode with the simulated-time runner: the production scheduler,
packing policy, Optuna sampler and pruner, OOM book and ledger (its runs kept in
memory, not in MLflow), against simulated GPUs that slow trials sharing them
(``hpsearch.telemetry``'s sharing model). It reports, per workload, the simulated
time each mode takes to the budget and the trial work it did (seconds of its
trials alone), the best fixed count found afterwards (the oracle), ``auto ÷
oracle`` and ``off ÷ auto`` in seconds per second of trial work (the ratio of
the times where every mode trains the same trials; fused groups share their
first trial's sizes and lengths, so member counts draw other trials), and the
best objective each reached, then checks the targets:

* ``auto`` within 10% of the oracle on every workload;
* ``auto`` never more than 3% slower than ``off``;
* on the idle 11% workload, ``auto`` at least 5× faster than ``off`` (max 8 per GPU).

With ``--fusion``, trials of one shape may also train fused (``fusion``, the
sharing model's fused groups): ``auto`` is packing auto with fusion auto (up to
16 members), and the oracle covers fused counts × process counts (``fixedPxM``:
P processes per GPU of M members each; M = 1 is unfused). Target: ``auto``
within 10% of that oracle on every workload.

With ``--unseen``, the same targets on workloads the policy was never tuned on
(:data:`UNSEEN`, written after its rules were last changed): other cards, loads,
trial lengths and worker start-ups.

    python scripts/bench_packing.py          # benchmarks/results/packing-<date>-simulated.json
    python scripts/bench_packing.py --fusion # packing-fusion-<date>-simulated.json
    python scripts/bench_packing.py --unseen # packing-unseen-<date>-simulated.json
    python scripts/bench_packing.py --workloads rtx4050-idle --gpus 1 --trials 40
    python scripts/bench_packing.py --real   # an NVIDIA GPU: off against auto, wall time
    python scripts/bench_packing.py --real --workloads idle-digits --modes off,auto,fixed8,ray-tune

``--real`` mode ``ray-tune`` runs the same trials under Ray Tune as its users share a GPU
(``tune.with_resources(..., {"cpu": 1, "gpu": 1/8})``, reused actors, OptunaSearch).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from bench_oom import (  # scripts/ is on the path when a script runs
    gpu_name,
    result_path,
    write_with_targets,
)
from rich.console import Console

if TYPE_CHECKING:
    from hpsearch.tracking import MemoryTracker

EPOCH_S = 15.0
"""A scripted trial's epoch alone on its GPU, in simulated seconds."""
STEP_S = 0.0036  # the simulated workload's step at batch 64, width 256, depth 1
CPUS_PER_GPU = 16
FIXED = tuple(range(1, 9))
FUSED = (1, 2, 4, 8, 16)
"""The member counts of the fused lab's oracle grid (1: unfused)."""
MEMBERS_TRAIN = "hpsearch.workloads.simulated_gpu:train_members"
REAL_TRIALS = 60
"""The budget of each ``--real`` search unless ``--trials`` says."""


@dataclass(frozen=True)
class LabWorkload:
    """A kind of search on a kind of GPU."""

    what: str
    gpu: str
    memory_total_mb: float
    space: dict[str, Any] = field(default_factory=dict)
    target: bool = False
    """Whether the 5x-over-off target applies (the idle workloads)."""
    trials: int = 60
    """Its budget (``--trials`` sets every workload's)."""
    interval_s: float = 1.0
    """Seconds between GPU samples (simulated)."""


WORKLOADS: dict[str, LabWorkload] = {
    "rtx4050-idle": LabWorkload(
        "the seeds' RTX 4050: 11% utilisation, 167 MiB",
        "RTX 4050 Laptop GPU",
        6141.0,
        {"utilization_pct": 11.0, "memory_mb": 167.0},
        target=True,
    ),
    "rtx4060-tuned": LabWorkload(
        "a tuned job on an RTX 4060: 45%, 2 GB",
        "RTX 4060",
        8188.0,
        {"utilization_pct": 45.0, "memory_mb": 2048.0},
    ),
    "rtx3090-saturated": LabWorkload(
        "a saturated RTX 3090: 95%, 20 GB",
        "RTX 3090",
        24576.0,
        {"utilization_pct": 95.0, "memory_mb": 20480.0},
    ),
    "16gb-memory-bound": LabWorkload(
        "a memory-bound 16 GB card: 30%, 9.5 GB",
        "16 GB GPU",
        16384.0,
        {"utilization_pct": 30.0, "memory_mb": 9728.0},
    ),
    "mixed": LabWorkload(
        "a mixed population: size grows with the sampled width and batch",
        "16 GB GPU",
        16384.0,
        {"batch_size": [32, 64, 128, 256, 512], "width": [128, 256, 512, 1024, 2048]},
    ),
    # Short trials, as people run them. The H200 main job as measured on 2026-11-26
    # (benchmarks/evidence/2026-11-26-nvidia-h200): trials of 0.3-1.9 s (median 0.6),
    # SM busy 2.3% on average, 815-831 MiB for its worker process, the first trial 6.1 s
    # (a new worker's start-up: imports, CUDA context, first kernels); 16 cores.
    "h200-main-job": LabWorkload(
        "the H200 main job replayed: 0.6 s trials at 2%, 830 MiB, a new worker starts in 5.5 s",
        "NVIDIA H200",
        143771.0,
        {
            "utilization_pct": 2.0,
            "memory_mb": 830.0,
            "epochs": 10,
            "steps_per_epoch": 17,  # 10 epochs of 0.06 s
            "cold_start_s": 5.5,
        },
        target=True,
        # The job's 48 trials would leave even the best fixed count 3.8x off: eight
        # new workers start in 5.5 s each. The same trials, a longer search.
        trials=300,
        interval_s=0.2,
    ),
    "short-3s": LabWorkload(
        "trials of 3 s at 6%, 2 GB, on an 80 GB card; a new worker starts in 3 s",
        "NVIDIA H100 80GB HBM3",
        81559.0,
        {
            "utilization_pct": 6.0,
            "memory_mb": 2048.0,
            "epochs": 10,
            "steps_per_epoch": 83,  # 10 epochs of 0.3 s
            "cold_start_s": 3.0,
        },
        target=True,
        trials=96,
        interval_s=0.2,
    ),
    "mixed-lengths": LabWorkload(
        "trials of 0.4 s to 90 s (sampled epochs and step), 5%, 1 GB, on an 80 GB card; "
        "workers start in 3 s",
        "NVIDIA H100 80GB HBM3",
        81559.0,
        {
            "utilization_pct": 5.0,
            "memory_mb": 1024.0,
            "epochs": [2, 8, 40, 200],
            "steps_per_epoch": [60, 120],  # epochs of 0.22 or 0.43 s
            "cold_start_s": 3.0,
        },
        trials=60,
        interval_s=0.2,
    ),
    # A search whose trials differ in how hard they work the GPU (a sampled model size):
    # its mean trial (31%) underpredicts two of its heavier ones together, which saturate
    # the GPU and still finish sooner than one after the other.
    "bimodal-util": LabWorkload(
        "trials of 3 s at 2% or 60% (sampled), 2 GB, on an 80 GB card; workers start in 3 s",
        "NVIDIA H100 80GB HBM3",
        81559.0,
        {
            "utilization_pct": [2.0, 60.0],
            "memory_mb": 2048.0,
            "epochs": 10,
            "steps_per_epoch": 83,  # 10 epochs of 0.3 s
            "cold_start_s": 3.0,
        },
        trials=96,
        interval_s=0.2,
    ),
}


UNSEEN: dict[str, LabWorkload] = {
    # Written on 2026-11-28, after the policy's rules and constants were last changed, and
    # never tuned on: other cards, loads, trial lengths and start-ups than the lab's.
    "a100-25pct": LabWorkload(
        "an A100 40 GB at 25%, 3 GB, 60 s trials", "A100-SXM4-40GB", 40960.0,
        {"utilization_pct": 25.0, "memory_mb": 3072.0}, trials=40,
    ),
    "tiny-4gb": LabWorkload(
        "a 4 GB card at 20%, 900 MiB, 60 s trials", "GTX 1650", 4096.0,
        {"utilization_pct": 20.0, "memory_mb": 900.0}, trials=40,
    ),
    "l4-0.2s": LabWorkload(
        "trials of 0.2 s at 3%, 400 MiB, on a 24 GB L4; a new worker starts in 2 s", "L4",
        23034.0,
        {"utilization_pct": 3.0, "memory_mb": 400.0, "epochs": 5, "steps_per_epoch": 11,
         "cold_start_s": 2.0},
        target=True, trials=200, interval_s=0.2,
    ),
    "half-busy-1.5s": LabWorkload(
        "trials of 1.5 s at 50%, 4 GB, on an 80 GB card; workers start in 3 s",
        "NVIDIA H100 80GB HBM3", 81559.0,
        {"utilization_pct": 50.0, "memory_mb": 4096.0, "epochs": 5, "steps_per_epoch": 83,
         "cold_start_s": 3.0},
        trials=96, interval_s=0.2,
    ),
    "long-idle": LabWorkload(
        "trials of 300 s at 5%, 1 GB, on a 48 GB card", "RTX A6000", 49140.0,
        {"utilization_pct": 5.0, "memory_mb": 1024.0, "epochs": 4,
         "steps_per_epoch": round(75 / STEP_S)},
        target=True, trials=40,
    ),
    "cold8-1s": LabWorkload(
        "trials of 1 s at 15%, 500 MiB, on a 48 GB card; a new worker starts in 8 s",
        "RTX A6000", 49140.0,
        {"utilization_pct": 15.0, "memory_mb": 500.0, "epochs": 10, "steps_per_epoch": 28,
         "cold_start_s": 8.0},
        trials=120, interval_s=0.2,
    ),
    "busy-70pct": LabWorkload(
        "a 24 GB card at 70%, 6 GB, 60 s trials", "RTX 4090", 24564.0,
        {"utilization_pct": 70.0, "memory_mb": 6144.0}, trials=30,
    ),
    # Written on 2026-12-01, after the rules last changed, and never tuned on either.
    "t4-8pct-20s": LabWorkload(
        "trials of 20 s at 8%, 1.2 GB, on a 16 GB T4; a new worker starts in 4 s", "Tesla T4",
        15360.0,
        {"utilization_pct": 8.0, "memory_mb": 1200.0, "epochs": 4,
         "steps_per_epoch": round(5 / STEP_S), "cold_start_s": 4.0},
        target=True, trials=80, interval_s=0.2,
    ),
    "a10-0.05s": LabWorkload(
        "trials of 0.05 s at 1%, 300 MiB, on a 24 GB A10; a new worker starts in 1.5 s", "A10",
        23028.0,
        {"utilization_pct": 1.0, "memory_mb": 300.0, "epochs": 2, "steps_per_epoch": 7,
         "cold_start_s": 1.5},
        target=True, trials=300, interval_s=0.2,
    ),
    "h100-35pct-12gb": LabWorkload(
        "an 80 GB card at 35%, 12 GB, 60 s trials", "NVIDIA H100 80GB HBM3", 81559.0,
        {"utilization_pct": 35.0, "memory_mb": 12288.0}, trials=40,
    ),
    "3090-memory-sampled": LabWorkload(
        "trials of 10 s at 20%, 2 GB or 9 GB (sampled), on a 24 GB card; workers start in 3 s",
        "RTX 3090", 24576.0,
        {"utilization_pct": 20.0, "memory_mb": [2048.0, 9216.0], "epochs": 5,
         "steps_per_epoch": round(2 / STEP_S), "cold_start_s": 3.0},
        trials=64, interval_s=0.2,
    ),
    "v100-load-sampled-5s": LabWorkload(
        "trials of 5 s at 5%, 15% or 40% (sampled), 1.5 GB, on a 16 GB V100; workers start "
        "in 4 s", "Tesla V100-SXM2-16GB", 16160.0,
        {"utilization_pct": [5.0, 15.0, 40.0], "memory_mb": 1536.0, "epochs": 5,
         "steps_per_epoch": round(1 / STEP_S), "cold_start_s": 4.0},
        trials=96, interval_s=0.2,
    ),
}  # fmt: skip
"""Workloads the policy was not tuned on (``--unseen``): whether its rules hold elsewhere."""

_EVERY = {**WORKLOADS, **UNSEEN}


def lab_config(
    name: str, mode: str, trials: int, gpus: int, fusion: bool = False
) -> dict[str, Any]:
    """One lab search: the workload's trials on ``gpus`` simulated GPUs, packed per ``mode``.

    With ``fusion``, ``auto`` fuses by measurement too and ``fixedPxM`` runs P
    processes per GPU of M fused members each.
    """
    workload = _EVERY[name]
    scripted = "utilization_pct" in workload.space
    space: dict[str, Any] = {
        "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
        "batch_size": 64,
        "width": 256,
        "depth": 1,
        "epochs": 4,
        # Scripted loads take EPOCH_S per epoch alone; modelled ones as their size says.
        "steps_per_epoch": round(EPOCH_S / STEP_S) if scripted else 500,
        "memory_budget_mb": workload.memory_total_mb,
        **workload.space,
    }
    # Whether the budget's trials differ in length or load: the sampler then must suggest
    # the same ones in every mode, or modes would compare trials, not packing.
    varied = not scripted or any(
        isinstance(space.get(k), list)
        for k in ("epochs", "steps_per_epoch", "utilization_pct", "memory_mb")
    )
    packing, members = packing_of(mode)
    fusing: dict[str, Any] = {"mode": "off"}
    if fusion and mode == "auto":
        fusing = {"mode": "auto", "max_members": max(FUSED), "train": MEMBERS_TRAIN}
    elif members > 1:
        fusing = {"mode": "fixed", "members": members, "train": MEMBERS_TRAIN}
    return {
        "study": {
            "name": f"lab-{name}-{gpus}gpu-{mode}",
            # Where the sampled sizes set each trial's work (mixed), a sampler that
            # suggests the same trials in every mode, so that modes compare packing,
            # not which sizes TPE happened to try with different histories.
            "sampler": {"type": "random" if varied else "tpe", "seed": 0},
            "n_trials": trials,
            "storage": "memory",  # the lab reads the study it is handed back, nothing else
        },
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "train": "hpsearch.workloads.simulated_gpu:train",
        "space": space,
        "execution": {"num_cpus": CPUS_PER_GPU * gpus},
        "packing": packing,
        "fusion": fusing,
        "telemetry": {
            "backend": "simulated",
            "interval_s": workload.interval_s,
            "simulated": {
                "source": "load",
                "gpus": gpus,
                "name": f"Simulated {workload.gpu}",
                "memory_total_mb": workload.memory_total_mb,
            },
        },
    }


def packing_of(mode: str) -> tuple[dict[str, Any], int]:
    """A mode's ``packing`` section and members per fused group: ``off``, ``auto``, or
    ``fixedP`` (P trial processes per GPU) and ``fixedPxM`` (each a group of M)."""
    if not mode.startswith("fixed"):
        return {"mode": mode}, 1
    per_gpu, _, fused = mode.removeprefix("fixed").partition("x")
    return {"mode": "fixed", "trials_per_gpu": int(per_gpu)}, int(fused or 1)


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
        # GPU-filling steps, few of them: 4 trials end within the step's 120 s.
        train = "hpsearch.workloads.sequences:train"
        space = {
            "lr": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
            "conv_channels": 512,
            "hidden_size": [768, 1024],
            "lstm_layers": 2,
            "batch_size": 256,
            "train_size": 4096,
            "epochs": 2,
        }
    return {
        "study": {
            "name": f"bench-packing-{name}-{mode}",
            "sampler": {"type": "tpe", "seed": 0},
            "n_trials": trials,
        },
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "train": train,
        "space": space,
        "packing": {**packing_of(mode)[0], "probe_seconds": 5, "cooldown_seconds": 20},
        "telemetry": {"backend": "nvml", "interval_s": 0.5},
    }


def run(config: dict[str, Any], *, simulated: bool) -> dict[str, Any]:
    """Run one search in a fresh folder (in memory where the machine has one); its figures.

    The lab keeps its runs in memory (``MemoryTracker``): written to MLflow, a
    200-trial search spent most of its minute in ``log_batch``. ``--real`` records
    to MLflow, as a user's search does.
    """
    import hpsearch
    from hpsearch.runner import SimulatedRunner
    from hpsearch.tracking import MemoryTracker

    tracker = MemoryTracker() if simulated else None
    tick_s = float(config["telemetry"]["interval_s"])
    scratch = "/dev/shm" if simulated and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=scratch) as folder:
        previous = os.getcwd()
        os.chdir(folder)
        try:
            path = Path(folder) / "bench.yaml"
            path.write_text(yaml.safe_dump(config))
            started = time.perf_counter()
            outcome = hpsearch.run(
                path,
                # In wall time, a line per trial as it ends: a run that is slow shows it.
                console=Console(file=io.StringIO() if simulated else sys.stdout, width=160),
                # The runner looks at the scheduler as often as the GPUs are sampled: a
                # real driver asks at each of Tune's steps, many times a second.
                runner=SimulatedRunner(tick_s=tick_s) if simulated else None,
                tracker=tracker,
            )
            wall = time.perf_counter() - started
            if tracker is not None:
                recorded = _memory_decisions(tracker, outcome.mlflow_parent_run_id)
            else:
                recorded = _decisions(folder, outcome.mlflow_parent_run_id)
            study = outcome.results.study
        finally:
            os.chdir(previous)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    work = _trial_work_s(config, study.trials) if simulated else None
    # One file holds both: trial processes per GPU, and members per fused group.
    decisions = [d for d in recorded if d.get("decides", "processes") == "processes"]
    fused = [d for d in recorded if d.get("decides") == "members"]
    return {
        "time_to_budget_s": round(outcome.elapsed_s, 1),
        **(
            {
                "trial_work_s": round(work, 1),
                "work_per_s": round(work / outcome.elapsed_s, 3) if outcome.elapsed_s else 0.0,
            }
            if work is not None
            else {}
        ),
        "bench_wall_s": round(wall, 1),
        "trials": len(study.trials),
        "complete": len(complete),
        "pruned": sum(t.state.name == "PRUNED" for t in study.trials),
        "failed": sum(t.state.name == "FAIL" for t in study.trials),
        "best_val_accuracy": max((t.value for t in complete if t.value is not None), default=None),
        "most_trials_allowed_per_gpu": max((d["limit"] for d in decisions), default=None),
        "decisions": len(decisions),
        **({"fusion_decisions": [d["reason"] for d in fused]} if fused else {}),
    }


def _trial_work_s(config: dict[str, Any], trials: list[Any]) -> float:
    """The work a search's trials did, in seconds of one trial alone on its GPU: each
    completed trial's planned epochs. A pruned trial counts nothing: in the lab it ran
    out of memory at its first step (the study keeps no intermediate values to say how
    far another got).

    What makes modes comparable where the trials differ in length: a fused group's
    members share its first trial's epochs and sizes, so one member count draws
    other trials than another (60 trials in groups of 16 drew four lengths, in
    groups of 8 eight), and the time to a budget of trials would compare draws.
    """
    from hpsearch.workloads.simulated_gpu import plan

    fixed = {k: v for k, v in config["space"].items() if not isinstance(v, (dict, list))}
    fixed.pop("memory_budget_mb", None)  # its work as planned, not its out-of-memory
    return sum(
        epoch.seconds
        for trial in trials
        if trial.state.name == "COMPLETE"
        for epoch in plan({**fixed, **trial.params}).epochs
    )


def _memory_decisions(tracker: MemoryTracker, run_id: str | None) -> list[dict[str, Any]]:
    if run_id is None:
        return []
    text = tracker.runs[run_id].artifacts.get("packing_decisions.json")
    decisions: list[dict[str, Any]] = json.loads(text) if text else []
    return decisions


def _decisions(folder: str, run_id: str | None) -> list[dict[str, Any]]:
    from mlflow.tracking import MlflowClient

    # An absolute URI: MLflow caches stores by URI, and each search has its own folder.
    client = MlflowClient(f"sqlite:///{Path(folder) / 'mlruns' / 'mlflow.db'}")
    if run_id is None:
        return []
    names = {a.path for a in client.list_artifacts(run_id)}
    if "packing_decisions.json" not in names:
        return []
    local = client.download_artifacts(run_id, "packing_decisions.json", folder)
    decisions: list[dict[str, Any]] = json.loads(Path(local).read_text())
    return decisions


def judge(name: str, modes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The oracle and the ratios for one workload, with each target's verdict.

    Modes are compared by the seconds each took per second of trial work
    (:func:`_trial_work_s`): where every mode trains the same trials, that is the
    ratio of their times to the budget; where fused groups drew other trials, it
    is the time the same work would have taken. ``*_by_time`` keep the raw ratios.
    """
    # The oracle is the best fixed count that completes every trial off does: one that
    # loses trials to out-of-memory reaches its budget sooner by not training them.
    every = {m: _seconds_per_work(r) for m, r in modes.items() if m.startswith("fixed")}
    whole = modes["off"]["complete"]
    fixed = {m: t for m, t in every.items() if modes[m]["complete"] >= whole} or every
    oracle = min(fixed, key=lambda m: fixed[m])
    auto, off = _seconds_per_work(modes["auto"]), _seconds_per_work(modes["off"])
    auto_s, off_s = modes["auto"]["time_to_budget_s"], modes["off"]["time_to_budget_s"]
    verdict: dict[str, Any] = {
        "oracle": oracle,
        "oracle_s": modes[oracle]["time_to_budget_s"],
        "auto_over_oracle": round(auto / fixed[oracle], 3),
        "off_over_auto": round(off / auto, 3),
        "auto_over_oracle_by_time": round(auto_s / modes[oracle]["time_to_budget_s"], 3),
        "off_over_auto_by_time": round(off_s / auto_s, 3),
        "target_auto_within_10pct_of_oracle": auto <= 1.10 * fixed[oracle],
        "target_auto_at_most_3pct_slower_than_off": auto <= 1.03 * off,
    }
    if _EVERY[name].target:
        verdict["target_idle_5x_over_off"] = off / auto >= 5.0
    return verdict


def _seconds_per_work(result: dict[str, Any]) -> float:
    """Wall seconds per second of trial work (time to the budget where work is not known)."""
    if "work_per_s" not in result:
        return float(result["time_to_budget_s"])
    rate = float(result["work_per_s"])
    return 1.0 / rate if rate > 0 else math.inf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real", action="store_true", help="run on this machine's NVIDIA GPU")
    parser.add_argument(
        "--trials", type=int, help="every workload's budget (default: each its own)"
    )
    parser.add_argument("--workloads", help="comma-separated subset of the workloads")
    parser.add_argument("--gpus", default="1,2", help="comma-separated GPU counts (the lab)")
    parser.add_argument("--modes", help="comma-separated subset of off,auto,fixed1..fixed8")
    parser.add_argument("--mps", action="store_true", help="--real: with an MPS daemon")
    parser.add_argument(
        "--fusion", action="store_true", help="the lab with fused groups: fused counts x processes"
    )
    parser.add_argument(
        "--unseen", action="store_true", help="the workloads the policy was not tuned on"
    )
    parser.add_argument(
        "--update",
        type=Path,
        metavar="FILE",
        help="rerun --modes (default auto) of a lab's results file and judge it again",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.real:
        real(args)
        return
    if args.update:
        update(args.update, args.modes, args.workloads, args.out)
        return
    names = list(UNSEEN if args.unseen else WORKLOADS)
    if args.workloads:
        names = [n for n in names if n in args.workloads.split(",")]
    modes = ["off", "auto", *(f"fixed{n}" for n in FIXED)]
    if args.fusion:
        modes = ["off", "auto", *(f"fixed{p}x{m}" for m in FUSED for p in FIXED)]
    if args.modes:
        modes = [m for m in modes if m in args.modes.split(",")]
    results: dict[str, Any] = {}
    for name in names:
        for gpus in (int(g) for g in args.gpus.split(",")):
            key = f"{name}-{gpus}gpu"
            per_mode = {}
            for mode in modes:
                budget = args.trials or _EVERY[name].trials
                config = lab_config(name, mode, budget, gpus, args.fusion)
                per_mode[mode] = run(config, simulated=True)
                print(key, mode, per_mode[mode], flush=True)
            fixed = any(m.startswith("fixed") for m in per_mode)
            verdict = judge(name, per_mode) if fixed and {"off", "auto"} <= set(per_mode) else {}
            results[key] = {"workload": _EVERY[name].what, "modes": per_mode, **verdict}
            print(key, verdict, flush=True)
    payload = {
        "date": time.strftime("%Y-%m-%d"),
        "device": "the packing lab: simulated GPUs that slow trials sharing them, simulated time",
        "cpu_count": os.cpu_count(),
        "trials": {name: args.trials or _EVERY[name].trials for name in names},
        "fusion": args.fusion,
        "results": results,
    }
    kind = "packing-fusion" if args.fusion else "packing"
    kind += "-unseen" if args.unseen else ""
    write_with_targets(args.out or result_path(kind, None), payload)


def update(path: Path, modes: str | None, workloads: str | None, out: Path | None) -> None:
    """Rerun some modes of a lab's results file (``auto`` by default) and judge it again.

    For a change to what ``auto`` decides: off and the fixed counts ask no policy, so
    they are kept as they were run (a change to the simulator must be checked to leave
    them alone before it is measured this way). The file's ``note`` says what was rerun,
    when.
    """
    payload = json.loads(path.read_text(encoding="utf-8"))
    rerun = modes.split(",") if modes else ["auto"]
    for key, result in payload["results"].items():
        name, _, gpus = key.rpartition("-")
        if workloads and name not in workloads.split(","):
            continue
        for mode in rerun:
            config = lab_config(
                name,
                mode,
                payload["trials"][name],
                int(gpus.removesuffix("gpu")),
                payload["fusion"],
            )
            result["modes"][mode] = run(config, simulated=True)
            print(key, mode, result["modes"][mode], flush=True)
        result.update(judge(name, result["modes"]))
    said = f"{', '.join(rerun)} rerun on {time.strftime('%Y-%m-%d')}"
    payload["note"] = "; ".join(filter(None, [payload.get("note"), said]))
    write_with_targets(out or path, payload)  # its tally of the targets is written anew


RAY_TUNE = "ray-tune"
"""The ``--real`` mode that runs the same trials under Ray Tune, as its users share a GPU."""


def ray_tune_static(
    config: dict[str, Any], per_gpu: int = 8, num_gpus: int | None = None
) -> dict[str, Any]:
    """The config's trials under Ray Tune: OptunaSearch over the same space and sampler seed,
    reused actors, ``{"cpu": 1, "gpu": 1/per_gpu}``; each trial runs the workload's own
    ``train`` with a local context and reports its last epoch (``num_gpus``: logical GPUs,
    where there is no NVIDIA one)."""
    import optuna
    import ray
    from ray import tune
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    from hpsearch.adapters import resolve_train_function
    from hpsearch.config import RunConfig
    from hpsearch.trial.context import TrialContext

    loaded = RunConfig.model_validate({**config, "packing": {"mode": "off"}})
    space = loaded.search_space.distributions()
    constants = {k: v for k, v in config["space"].items() if not isinstance(v, (dict, list))}
    train_target = config["train"]

    def trainable(params: dict[str, Any]) -> None:
        train = resolve_train_function(train_target)
        ctx = TrialContext.local()
        train({**constants, **params}, ctx)
        tune.report(dict(ctx.history[-1].metrics) if ctx.history else {})

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    started = time.perf_counter()
    ray.init(address="local", include_dashboard=False, log_to_driver=False, num_gpus=num_gpus)
    try:
        searcher = ConcurrencyLimiter(
            OptunaSearch(
                space,
                metric="val_accuracy",
                mode="max",
                sampler=optuna.samplers.TPESampler(seed=config["study"]["sampler"]["seed"]),
            ),
            max_concurrent=per_gpu,
        )
        with tempfile.TemporaryDirectory() as folder:
            tuner = tune.Tuner(
                tune.with_resources(trainable, {"cpu": 1, "gpu": 1 / per_gpu}),
                tune_config=tune.TuneConfig(
                    search_alg=searcher,
                    num_samples=config["study"]["n_trials"],
                    reuse_actors=True,
                    max_concurrent_trials=per_gpu,
                ),
                run_config=tune.RunConfig(storage_path=folder, verbose=1),
            )
            results = tuner.fit()
    finally:
        ray.shutdown()
    wall = time.perf_counter() - started
    scores = [(results[i].metrics or {}).get("val_accuracy") for i in range(len(results))]
    return {
        "time_to_budget_s": round(wall, 1),
        "trials": len(results),
        "best_val_accuracy": max((s for s in scores if s is not None), default=None),
        "gpu_per_trial": 1 / per_gpu,
    }


def real(args: argparse.Namespace) -> None:
    """Packing modes on this machine's NVIDIA GPU, in wall time, with or without MPS."""
    names = ["idle-digits", "filling-cnn-lstm"]
    if args.workloads:
        names = [n for n in names if n in args.workloads.split(",")]
    modes = args.modes.split(",") if args.modes else ["off", "auto"]
    results: dict[str, Any] = {}
    for name in names:
        per_mode: dict[str, Any] = {}
        for mode in modes:
            config = real_config(name, mode, args.trials or REAL_TRIALS)
            if args.mps:
                config["packing"]["mps"] = "auto"
            if mode == RAY_TUNE:
                import torch

                # Without an NVIDIA GPU (a plumbing run), one logical GPU for Ray to share.
                logical = None if torch.cuda.is_available() else 1
                per_mode[mode] = ray_tune_static(config, num_gpus=logical)
            else:
                per_mode[mode] = run(config, simulated=False)
            print(name, mode, per_mode[mode], flush=True)
        verdict: dict[str, Any] = {}
        if {"off", "auto"} <= set(per_mode):
            ratio = per_mode["off"]["time_to_budget_s"] / per_mode["auto"]["time_to_budget_s"]
            verdict["off_over_auto"] = round(ratio, 3)
            # The GPU issues' targets: >= 4x on the idle workload, >= 0.97x on the filling one.
            floor = 4.0 if name == "idle-digits" else 0.97
            verdict[f"target_off_over_auto_at_least_{floor}"] = ratio >= floor
        fixed = {m: r["time_to_budget_s"] for m, r in per_mode.items() if m.startswith("fixed")}
        if fixed and "auto" in per_mode:
            best = min(fixed, key=lambda m: fixed[m])
            auto = per_mode["auto"]["time_to_budget_s"]
            verdict["best_fixed"] = best
            verdict["auto_over_best_fixed"] = round(auto / fixed[best], 3)
            verdict["target_auto_within_10pct_of_best_fixed"] = auto <= 1.10 * fixed[best]
        if RAY_TUNE in per_mode and "auto" in per_mode:
            tune_s = per_mode[RAY_TUNE]["time_to_budget_s"]
            verdict["auto_over_ray_tune"] = round(per_mode["auto"]["time_to_budget_s"] / tune_s, 3)
            verdict["target_auto_no_slower_than_ray_tune"] = verdict["auto_over_ray_tune"] <= 1.0
        results[name] = {**per_mode, **verdict}
    import torch

    device = gpu_name() if torch.cuda.is_available() else None
    out = args.out or result_path("packing", device or "cpu", "-mps" if args.mps else "")
    payload = {
        "date": time.strftime("%Y-%m-%d"),
        "device": device or "CPU (no GPU: the plumbing only)",
        "mps": args.mps,
        "trials": args.trials or REAL_TRIALS,
        "results": results,
    }
    write_with_targets(out, payload)


if __name__ == "__main__":
    main()
