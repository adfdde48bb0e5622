"""The sequences workload's fused groups against its trials alone, in real time on this CPU.

For each shape it trains, on one thread, one trial alone
(``hpsearch.workloads.sequences:train``) and fused groups of K = 1, 2, 4, 8
members (``train_members``, what a search with ``fusion`` runs), two epochs
each, and keeps the last epoch's samples per second (its samples over its
wall time, the in-process data loading included, validation not):

* **alone**: one trial; **separate** is one such trial per core, counted as
  cores x alone (perfect scaling: the most separate processes could do);
* **fused K**: the group's aggregate (K members' samples over the epoch);
* **auto**: the member count :func:`hpsearch.placement.choose_members` picks
  from these readings, as ``fusion: {mode: auto}`` does in a search.

A CNN→LSTM's recurrence is a loop of small steps: fused, each step is one
batched product for all members, but on a CPU core that costs about what the
members' steps cost apart, so auto is expected to decline here; on a GPU, where
one small model leaves the device idle, the same group is what fusion is for.

    python scripts/bench_fusion_sequences.py   # writes fusion-sequences-<date>-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

from hpsearch import TrialContext
from hpsearch.adapters import Member
from hpsearch.placement import FusionReading, choose_members
from hpsearch.trial.context import LocalTrialContext
from hpsearch.workloads.sequences import resolve_params, train, train_members

REPO = Path(__file__).resolve().parents[1]
COUNTS = (1, 2, 4, 8)
SHAPES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "small": {"conv_channels": 16, "conv_layers": 1, "hidden_size": 32, "batch_size": 32},
}
LRS = (1e-3, 2e-3, 3e-3, 5e-3, 7e-3, 1e-2, 2e-3, 4e-3)


def _last_epoch_samples_per_sec(ctx: LocalTrialContext, samples: int) -> float:
    return samples / float(ctx.history[-1].metrics["epoch_seconds"])


def alone(shape: dict[str, Any]) -> float:
    """One trial's samples/s over its last epoch."""
    ctx = TrialContext.local(seed=0)
    train({**shape, "epochs": 2}, ctx)
    return _last_epoch_samples_per_sec(ctx, int(resolve_params(shape)["train_size"]))


def fused(shape: dict[str, Any], members: int) -> float:
    """A group of ``members``: their aggregate samples/s over its last epoch."""
    group = [
        Member({**shape, "epochs": 2, "lr": LRS[k]}, TrialContext.local(trial_number=k, seed=k))
        for k in range(members)
    ]
    train_members(group)
    ctx = group[0].ctx
    assert isinstance(ctx, LocalTrialContext)
    samples = int(resolve_params(shape)["train_size"])
    return members * _last_epoch_samples_per_sec(ctx, samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cores = os.cpu_count() or 1
    began = time.time()
    results: dict[str, Any] = {}
    for name, shape in SHAPES.items():
        solo = alone(shape)
        aggregate = {k: fused(shape, k) for k in COUNTS}
        readings = [FusionReading(1, solo)] + [
            FusionReading(k, v) for k, v in aggregate.items() if k > 1
        ]
        choice = choose_members(readings, max_members=max(COUNTS))
        best = max(aggregate.values())
        results[name] = {
            "params": resolve_params(shape),
            "alone_samples_per_sec": round(solo, 1),
            "separate_samples_per_sec": round(cores * solo, 1),
            "best_fused_over_alone": round(best / solo, 2),
            "best_fused_over_separate": round(best / (cores * solo), 2),
            "auto_members": choice.members,
            "fused": {
                str(k): {
                    "aggregate_samples_per_sec": round(v, 1),
                    "over_alone": round(v / solo, 2),
                    "over_separate": round(v / (cores * solo), 2),
                }
                for k, v in aggregate.items()
            },
            "auto": {"members": choice.members, "reason": choice.reason},
        }
        print(name, json.dumps(results[name]["fused"]), choice.reason, flush=True)
    report = {
        "benchmark": "fusion-sequences",
        "date": time.strftime("%Y-%m-%d"),
        "device": f"cpu, {cores} cores",
        "machine": {"cpu_count": cores, "platform": platform.platform()},
        "threads": 1,
        "wall_s": round(time.time() - began, 1),
        "results": results,
    }
    out = args.out or REPO / "benchmarks" / "results" / (
        f"fusion-sequences-{report['date']}-cpu.json"
    )
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
