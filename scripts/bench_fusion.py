"""Fused trials against separate trial processes, in real time on this machine's CPU (or GPU).

For each digits-MLP shape of phase1's space (width, depth, batch), it measures
the steady-state training throughput (AdamW, forward, backward, step; data
gathered in memory as :class:`hpsearch.torch.fused.MemberBatches` gathers it):

* **separate**: one unfused trial per process, one thread each, as many
  processes at once as there are cores: the aggregate samples/s of the cores;
* **fused K** for K = 1, 2, 4, 8, 16: K members in one model
  (``hpsearch.torch.fused``), laid out as one process on one thread, one
  process using every core, or one process per core with K/cores members each;
  the best layout counts;
* **auto**: the member count :func:`hpsearch.placement.choose_members` picks
  from the groups measured on one core (as a trial runs), then run as one such
  group per core (1 member: the trials run unfused, as separate);
* at the smallest width, ``vmap`` against the fused layers, and what a member
  leaving costs: masking it (the step still computes it) against rebuilding the
  stack without it.

Targets (the issue "Fused trials"): at width <= 64, 16 fused members reach 3x
the separate processes' aggregate samples/s; at width >= 256, auto is within 3%
of separate (it measures and declines).

    python scripts/bench_fusion.py                     # benchmarks/results/fusion-<date>-cpu.json
    python scripts/bench_fusion.py --seconds 1 --shapes 32x1x16
    python scripts/bench_fusion.py --real              # on this machine's NVIDIA GPU
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MEMBER_COUNTS = (1, 2, 4, 8, 16)
# Phase1's space spans width 16-512, depth 1-4, batch 16-256: its corners and middle.
SHAPES = ("32x1x16", "32x1x64", "64x2x64", "256x2x64", "512x2x128")
WARMUP_STEPS = 20


@dataclass
class Run:
    """One measurement: a shape, a member count, fused or not, and how it runs."""

    width: int
    depth: int
    batch: int
    members: int
    fused: bool
    threads: int
    seconds: float
    device: str = "cpu"
    method: str = "layers"
    leave: str | None = None
    """``mask``: half the members masked out of each step; ``rebuild``: they leave the stack."""


class Trainer:
    """The digits MLP's training step for ``run.members`` members, fused or one unfused."""

    def __init__(self, run: Run) -> None:
        import torch
        from torch import nn

        from hpsearch.torch.fused import FusedAdamW, MemberBatches, fuse
        from hpsearch.workloads.digits import build_model, load_split

        self.run = run
        torch.set_num_threads(run.threads)
        x_train, y_train, _, _ = load_split()
        modules = []
        for seed in range(run.members):
            torch.manual_seed(seed)
            modules.append(build_model(run.width, run.depth, 0.1).to(run.device))
        generators = [torch.Generator().manual_seed(seed) for seed in range(run.members)]
        tensors = [x_train.to(run.device), y_train.to(run.device)]
        self.data = MemberBatches(tensors, run.batch, generators)
        lrs = [1e-3 * (1 + k) for k in range(run.members)]
        self.loss_fn = nn.CrossEntropyLoss(reduction="none")
        self.model: Any
        self.optimizer: Any
        if run.fused:
            self.model = fuse(modules, method=run.method)  # type: ignore[arg-type]
            self.optimizer = FusedAdamW(self.model.parameters(), run.members, lr=lrs)
        else:
            assert run.members == 1
            self.model = modules[0]
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lrs[0])
        self.model.train()
        self.active = None
        if run.leave == "mask":
            self.active = torch.tensor([k % 2 == 0 for k in range(run.members)])
        self._batches = iter(self.data)

    def next_batch(self) -> tuple[Any, ...]:
        try:
            return next(self._batches)
        except StopIteration:
            self._batches = iter(self.data)
            return next(self._batches)

    def step(self) -> int:
        """One training step; the samples it trained on."""
        from hpsearch.torch.fused import member_losses

        x, y = self.next_batch()
        self.optimizer.zero_grad()
        if self.run.fused:
            losses = member_losses(self.loss_fn, self.model(x), y)
            losses.sum().backward()  # type: ignore[no-untyped-call]
            self.optimizer.step(self.active)
        else:
            loss = self.loss_fn(self.model(x[0]), y[0]).mean()
            loss.backward()
            self.optimizer.step()
        return int(x.shape[0] * x.shape[1])

    def rebuild(self) -> float:
        """Half the members leave the stack; the seconds it took."""
        from hpsearch.torch.fused import keep

        self.synchronize()
        began = time.perf_counter()
        keep(range(0, self.run.members, 2), self.model, self.optimizer, self.data)
        took = time.perf_counter() - began
        self._batches = iter(self.data)
        return took

    def synchronize(self) -> None:
        import torch

        if self.run.device.startswith("cuda"):
            torch.cuda.synchronize()


def measure(run: Run) -> dict[str, Any]:
    """Train for ``run.seconds`` after a warm-up; samples/s of the group, its peak memory."""
    import torch

    trainer = Trainer(run)
    for _ in range(WARMUP_STEPS):
        trainer.step()
    rebuild_s = None
    if run.leave == "rebuild":
        rebuild_s = trainer.rebuild()
        for _ in range(3):
            trainer.step()
    trainer.synchronize()
    began = time.perf_counter()
    samples = steps = 0
    while time.perf_counter() - began < run.seconds:
        samples += trainer.step()
        steps += 1
    trainer.synchronize()
    took = time.perf_counter() - began
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if run.device.startswith("cuda"):
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    return {
        "samples_per_sec": samples / took,
        "step_ms": 1000 * took / max(1, steps),
        "steps": steps,
        "peak_memory_mb": round(peak_mb, 1),
        "rebuild_ms": None if rebuild_s is None else round(1000 * rebuild_s, 2),
    }


def in_processes(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run each measurement in its own process, all at once; their results in order."""

    def one(run: dict[str, Any]) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, __file__, "--worker", json.dumps(run)],
            capture_output=True,
            text=True,
            check=False,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        if done.returncode != 0:
            raise RuntimeError(f"worker {run} failed:\n{done.stderr[-2000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]

    with ThreadPoolExecutor(len(runs)) as pool:
        return list(pool.map(one, runs))


def bench_shape(
    shape: str,
    cores: int,
    seconds: float,
    device: str,
    *,
    counts: tuple[int, ...] = MEMBER_COUNTS,
    quick: bool = False,
) -> dict[str, Any]:
    """Every layout of one shape: separate processes, fused counts, auto, and the extras."""
    from hpsearch.placement import FusionReading, choose_members

    width, depth, batch = (int(v) for v in shape.split("x"))
    base = {"width": width, "depth": depth, "batch": batch, "seconds": seconds, "device": device}
    parallel = 1 if device.startswith("cuda") else cores
    separate = in_processes([{**base, "members": 1, "fused": False, "threads": 1}] * parallel)
    separate_sps = sum(r["samples_per_sec"] for r in separate)
    result: dict[str, Any] = {
        "separate": {
            "processes": parallel,
            "aggregate_samples_per_sec": round(separate_sps, 1),
            "per_trial_samples_per_sec": round(separate_sps / parallel, 1),
            "peak_memory_mb_per_process": max(r["peak_memory_mb"] for r in separate),
        },
        "fused": {},
    }
    # What the policy reads: a group of k members in one process on one core, as
    # a trial runs (cpus_per_trial 1); one member runs unfused.
    readings = [FusionReading(1, separate_sps / parallel, None)]
    for k in counts:
        layouts: dict[str, dict[str, Any]] = {}
        runs = {"one process, one thread": [{**base, "members": k, "fused": True, "threads": 1}]}
        if parallel > 1 and not quick:
            runs["one process, every thread"] = [
                {**base, "members": k, "fused": True, "threads": parallel}
            ]
            if k >= parallel and k % parallel == 0:
                runs[f"{parallel} processes"] = [
                    {**base, "members": k // parallel, "fused": True, "threads": 1}
                ] * parallel
        for name, group in runs.items():
            figures = in_processes(group)
            layouts[name] = {
                "aggregate_samples_per_sec": round(sum(r["samples_per_sec"] for r in figures), 1),
                "peak_memory_mb": sum(r["peak_memory_mb"] for r in figures),
            }
        alone = layouts["one process, one thread"]
        if k > 1:
            readings.append(
                FusionReading(k, alone["aggregate_samples_per_sec"], alone["peak_memory_mb"])
            )
        best_name = max(layouts, key=lambda n: layouts[n]["aggregate_samples_per_sec"])
        best = layouts[best_name]
        result["fused"][str(k)] = {
            "layouts": layouts,
            "best_layout": best_name,
            "aggregate_samples_per_sec": best["aggregate_samples_per_sec"],
            "per_member_samples_per_sec": round(best["aggregate_samples_per_sec"] / k, 1),
            "over_separate": round(best["aggregate_samples_per_sec"] / separate_sps, 3),
        }
    choice = choose_members(readings, max_members=max(counts))
    # Auto as the search runs it: a group of the chosen size on each core at once.
    auto_sps = separate_sps
    if choice.members > 1 and quick:  # one group per core, from the one-core reading
        auto_sps = (
            parallel * readings[[r.members for r in readings].index(choice.members)].samples_per_sec
        )
    elif choice.members > 1:
        groups = in_processes(
            [{**base, "members": choice.members, "fused": True, "threads": 1}] * parallel
        )
        auto_sps = sum(r["samples_per_sec"] for r in groups)
    result["auto"] = {
        "members": choice.members,
        "groups_at_once": parallel,
        "reason": choice.reason,
        "aggregate_samples_per_sec": round(auto_sps, 1),
        "over_separate": round(auto_sps / separate_sps, 3),
    }
    if width <= 64 and "16" in result["fused"]:
        sixteen = result["fused"]["16"]["over_separate"]
        result["target_16_fused_at_least_3x_separate"] = sixteen >= 3.0
    if width >= 256:
        result["target_auto_within_3pct_of_separate"] = auto_sps >= 0.97 * separate_sps
    return result


def bench_extras(cores: int, seconds: float, device: str) -> dict[str, Any]:
    """vmap against fused layers; masking a departed member against rebuilding the stack."""
    base = {"width": 32, "depth": 1, "batch": 16, "seconds": seconds, "device": device}
    extras: dict[str, Any] = {"shape": "32x1x16", "vmap_vs_layers": {}, "member_leaving": {}}
    for k in (8, 16):
        runs = [
            {**base, "members": k, "fused": True, "threads": 1, "method": method}
            for method in ("layers", "vmap")
        ]
        layers, vmapped = (in_processes([run])[0] for run in runs)
        extras["vmap_vs_layers"][str(k)] = {
            "layers_samples_per_sec": round(layers["samples_per_sec"], 1),
            "vmap_samples_per_sec": round(vmapped["samples_per_sec"], 1),
            "faster": "layers"
            if layers["samples_per_sec"] >= vmapped["samples_per_sec"]
            else "vmap",
        }
    mask, rebuild = (
        in_processes([{**base, "members": 16, "fused": True, "threads": 1, "leave": how}])[0]
        for how in ("mask", "rebuild")
    )
    extras["member_leaving"] = {
        "what": "16 members, half leave: the step time of the 8 left",
        "mask_step_ms": round(mask["step_ms"], 3),
        "rebuild_step_ms": round(rebuild["step_ms"], 3),
        "rebuild_once_ms": rebuild["rebuild_ms"],
        "cheaper": "rebuild" if rebuild["step_ms"] < mask["step_ms"] else "mask",
    }
    return extras


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per measurement")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="WIDTHxDEPTHxBATCH,...")
    parser.add_argument("--counts", default=",".join(map(str, MEMBER_COUNTS)), help="K,...")
    parser.add_argument("--no-extras", action="store_true", help="skip vmap and leaving")
    parser.add_argument(
        "--quick", action="store_true", help="one layout, auto not re-run (a dry run)"
    )
    parser.add_argument("--real", action="store_true", help="on this machine's NVIDIA GPU")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(Run(**json.loads(args.worker)))))
        return
    cores = len(os.sched_getaffinity(0))
    device, where = "cpu", "cpu"
    if args.real:
        from bench_oom import gpu_name  # scripts/ is on the path when a script runs

        device, where = "cuda", gpu_name()
    from bench_oom import result_path, write_with_targets

    tag = re.sub(r"[^a-z0-9]+", "-", where.lower()).strip("-")
    out = args.out or result_path("fusion", None).with_name(
        f"fusion-{time.strftime('%Y-%m-%d')}-{tag}.json"
    )
    results: dict[str, Any] = {}
    payload: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "device": where if args.real else f"{platform.processor() or platform.machine()} CPU",
        "cpu_count": cores,
        "seconds_per_measurement": args.seconds,
        "results": results,
        "extras": None,
    }
    for shape in args.shapes.split(","):
        counts = tuple(int(k) for k in args.counts.split(","))
        results[shape] = bench_shape(
            shape, cores, args.seconds, device, counts=counts, quick=args.quick
        )
        print(shape, json.dumps({k: v for k, v in results[shape].items() if k != "fused"}))
        for k, figures in results[shape]["fused"].items():
            print(
                f"  fused {k:>2}: {figures['over_separate']}x separate ({figures['best_layout']})"
            )
        # Written after each shape: a run stopped at its time limit (the GPU kit's step
        # on an H200 ran past 120 s after its first shape) keeps what it measured.
        write_with_targets(out, payload)
    if not args.no_extras:
        payload["extras"] = bench_extras(cores, args.seconds, device)
        print(json.dumps(payload["extras"], indent=1))
        write_with_targets(out, payload)


if __name__ == "__main__":
    main()
