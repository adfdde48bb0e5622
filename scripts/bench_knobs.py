"""Samples/s of the built-in workloads under each throughput knob, on this machine's device.

Each workload trains with a fixed model from a baseline (fp32, batch 64, no
DataLoader workers, every other knob off); then one knob at a time is changed.
Every setting runs ``--repeats`` times through ``hpsearch.torch`` exactly as a
trial would (a local trial context, the toolkit's meter), and the median
steady-state samples/s, step time, data-wait share and peak memory are kept,
with the knobs that were in effect: a knob that does not apply on this device
(fp16 or TF32 on a CPU) is listed as such, not measured as if it had.

    python scripts/bench_knobs.py                 # benchmarks/results/knobs-<date>-<device>.json
    python scripts/bench_knobs.py --workload digits --repeats 3
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from hpsearch import TrialContext
from hpsearch.workloads import digits, sequences

REPO = Path(__file__).resolve().parents[1]

WORKLOADS: dict[str, tuple[Callable[..., None], dict[str, Any]]] = {
    "digits": (digits.train, {"epochs": 6, "width": 256, "depth": 2, "batch_size": 64}),
    "sequences": (sequences.train, {"epochs": 3, "train_size": 1024, "batch_size": 64}),
}

SETTINGS: list[tuple[str, dict[str, Any]]] = [
    ("baseline", {}),
    ("batch_size=16", {"batch_size": 16}),
    ("batch_size=256", {"batch_size": 256}),
    ("batch 16 x accumulate 4", {"batch_size": 16, "grad_accum_steps": 4}),
    ("num_workers=1", {"num_workers": 1}),
    ("num_workers=2, prefetch 4", {"num_workers": 2, "prefetch_factor": 4}),
    ("pin_memory + non_blocking", {"pin_memory": True, "non_blocking": True}),
    ("precision=bf16", {"precision": "bf16"}),
    ("precision=fp16", {"precision": "fp16"}),
    ("tf32", {"tf32": True}),
    ("cudnn_benchmark", {"cudnn_benchmark": True}),
    ("channels_last", {"channels_last": True}),
    ("grad_checkpointing", {"grad_checkpointing": True}),
    ("compile", {"compile": True}),
]


def run_setting(train: Callable[..., None], params: dict[str, Any], device: str) -> dict[str, Any]:
    """One training run; the figures of its last report and the knobs in effect."""
    ctx = TrialContext.local(device=device)
    started = time.perf_counter()
    train(params, ctx)
    wall = time.perf_counter() - started
    last = ctx.history[-1].metrics
    return {
        "wall_s": wall,
        "samples_per_sec": last.get("samples_per_sec"),
        "step_time_ms": last.get("step_time_ms"),
        "data_wait_share": last.get("data_wait_share"),
        "peak_memory_mb": last.get("peak_memory_mb"),
        "val_accuracy": last.get("val_accuracy"),
        "effective": ctx.knobs,
        "notes": ctx.knob_notes,
    }


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def bench(
    workloads: list[str],
    repeats: int,
    device: str,
    settings: list[tuple[str, dict[str, Any]]] = SETTINGS,
    epochs: int | None = None,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in workloads:
        train, base = WORKLOADS[name]
        if epochs is not None:
            base = {**base, "epochs": epochs}
        # One untimed run first: data generation, caches and lazy imports would
        # otherwise be charged to the baseline.
        run_setting(train, base, device)
        baseline_rate: float | None = None
        for label, change in settings:
            params = {**base, **change}
            runs = [run_setting(train, params, device) for _ in range(repeats)]
            rate = median_of(runs, "samples_per_sec")
            if label == "baseline":
                baseline_rate = rate
            notes = runs[0]["notes"]
            row = {
                "workload": name,
                "setting": label,
                "requested": change,
                "effective": runs[0]["effective"],
                "applied": not notes,
                "notes": notes,
                "samples_per_sec": rate,
                "speedup_vs_baseline": rate / baseline_rate if rate and baseline_rate else None,
                "step_time_ms": median_of(runs, "step_time_ms"),
                "data_wait_share": median_of(runs, "data_wait_share"),
                "peak_memory_mb": median_of(runs, "peak_memory_mb"),
                "val_accuracy": median_of(runs, "val_accuracy"),
                "wall_s": median_of(runs, "wall_s"),
                "repeats": repeats,
                "errors": [r["error"] for r in runs if "error" in r],
            }
            rows.append(row)
            speed = f"{rate:,.0f} samples/s" if rate else "no steady-state figure"
            ratio = f" ({row['speedup_vs_baseline']:.2f}x)" if row["speedup_vs_baseline"] else ""
            applied = "" if row["applied"] else "  [not applied here: " + "; ".join(notes) + "]"
            print(f"{name:10s} {label:28s} {speed}{ratio}{applied}", flush=True)
    return rows


def device_description(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "device": device,
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
    }
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=[*WORKLOADS, "all"], default="all")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--settings", help="comma-separated subset of the settings' labels")
    parser.add_argument("--epochs", type=int, help="instead of each workload's own (a quick run)")
    parser.add_argument("--out", type=Path, help="JSON file (default under benchmarks/results/)")
    args = parser.parse_args()
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    workloads = list(WORKLOADS) if args.workload == "all" else [args.workload]
    # The notes are in the JSON and the printed lines; one warning per run is noise here.
    logging.getLogger("hpsearch.torch").setLevel(logging.ERROR)
    settings = SETTINGS
    if args.settings:
        wanted = args.settings.split(",")
        unknown = sorted(set(wanted) - {label for label, _ in SETTINGS})
        if unknown:
            parser.error(f"unknown settings {unknown}; known: {[label for label, _ in SETTINGS]}")
        settings = [(label, change) for label, change in SETTINGS if label in wanted]
    rows = bench(workloads, args.repeats, device, settings, args.epochs)
    described = device_description(device)
    tag = described.get("gpu", "cpu").lower().replace(" ", "-")
    out = (
        args.out
        or REPO / "benchmarks" / "results" / f"knobs-{time.strftime('%Y-%m-%d')}-{tag}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"date": time.strftime("%Y-%m-%d"), **described, "results": rows}, indent=2)
        + "\n",
        encoding="utf-8",
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
