"""Build the simulated GPU traces shipped in hpsearch/telemetry/traces/ from the seeds' numbers.

Each trace reproduces what a field note measured (by nvidia-smi or a script)
on a real card. Values are generated deterministically and then adjusted so
the trace's statistics are exactly the note's. Run from the repository root:

    .venv/bin/python scripts/make_seed_traces.py
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from hpsearch.telemetry import GpuSample, TraceWriter, read_trace, summarize

OUT = Path(__file__).resolve().parents[1] / "hpsearch" / "telemetry" / "traces"


def _with_sum(values: list[float], total: float, keep: Sequence[int] = ()) -> list[float]:
    """Shift the free values (not in ``keep``) evenly so the list sums to ``total``."""
    free = [i for i in range(len(values)) if i not in keep]
    shift = (total - sum(values)) / len(free)
    return [v + shift if i in free else v for i, v in enumerate(values)]


def rtx4050_seed004() -> tuple[str, list[GpuSample]]:
    """Seed 004: RTX 4050 Laptop GPU (6 GB), debug run at batch 32.

    90 samples over 300 s; utilisation mean 11.4%, min 0, max 20; memory peak
    167 MB, mean 2.2% of 6141 MB; power mean 26.8 W, min 1.7 W, one 590 W reading.
    """
    rng = random.Random(4)
    n, interval, total_mb, spike_at = 90, 300 / 90, 6141.0, 6
    # Each block of ten samples (one "epoch" of the debug loop) has the same mix of
    # utilisation readings, so any ten consecutive samples average 11.4%.
    block = [0.0, 8.0, 14.0, 20.0, 12.0, 15.0, 11.0, 14.0, 9.0, 11.0]
    util: list[float] = []
    for b in range(n // len(block)):
        values = list(block)
        if b:
            rng.shuffle(values)
        util += values
    memory = [round(rng.uniform(128, 140), 1) for _ in range(n)]
    memory[3] = 167.0  # the peak
    memory = _with_sum(memory, 0.022 * total_mb * n, keep=[3])
    power = [1.7 + 1.55 * u + rng.uniform(-0.5, 0.5) * (u > 0) for u in util]
    power[spike_at] = 590.0  # the note's "likely measurement error/spike"
    zero = util.index(0.0)
    power[zero] = 1.7
    power = _with_sum(power, 26.8 * n, keep=[spike_at, zero])
    samples = [
        GpuSample(
            time=round(i * interval, 3),
            index=0,
            name="NVIDIA GeForce RTX 4050 Laptop GPU",
            utilization_pct=util[i],
            memory_used_mb=memory[i],
            memory_total_mb=total_mb,
            power_w=power[i],
            # The note does not give the limit; 115 W is the top of the laptop part's range.
            power_limit_w=115.0,
            temperature_c=float(round(45 + util[i] / 3)),
            processes=(),
        )
        for i in range(n)
    ]
    header = (
        "# Seed 004: NVIDIA GeForce RTX 4050 Laptop GPU (6 GB), debug run, batch 32.\n"
        "# 90 samples over 300 s. Utilisation mean 11.4%, min 0, max 20; memory peak 167 MB,\n"
        "# mean 2.2% of 6141 MB; power mean 26.8 W (one 590 W reading, a measurement spike),\n"
        "# min 1.7 W. Power limit not in the note: 115 W assumed (top of the laptop range).\n"
    )
    return header, samples


def rtx4060_seed000() -> tuple[str, list[GpuSample]]:
    """Seed 000: RTX 4060 (8 GB) after its input-pipeline work: 43-49% peak, ~2.07 GB of 8 GB."""
    rng = random.Random(0)
    n, total_mb = 60, 8188.0
    util = [float(rng.choice([30, 34, 38, 41, 43, 45, 47, 49])) for _ in range(n)]
    memory = [round(rng.uniform(1950, 2070), 1) for _ in range(n)]
    memory[10] = 2070.0
    samples = [
        GpuSample(
            time=float(i),
            index=0,
            name="NVIDIA GeForce RTX 4060",
            utilization_pct=util[i],
            memory_used_mb=min(memory[i], 2070.0),
            memory_total_mb=total_mb,
            power_w=round(18 + 1.4 * util[i] + rng.uniform(-2, 2), 1),
            power_limit_w=115.0,
            temperature_c=float(round(50 + util[i] / 4)),
            processes=(),
        )
        for i in range(n)
    ]
    header = (
        "# Seed 000: NVIDIA GeForce RTX 4060 (8 GB) after tuning: utilisation 43-49% at peak,\n"
        "# memory ~2.07 GB of 8 GB. 60 samples at 1 s. Power limit 115 W (the card's TBP).\n"
    )
    return header, samples


def rtx3090_seed001() -> tuple[str, list[GpuSample]]:
    """Seed 001: RTX 3090 (24 GB) when tuned: 90-100%, 18-22 GB, 300-350 W of 350 W."""
    rng = random.Random(1)
    n, total_mb = 60, 24576.0
    util = [float(rng.randint(90, 100)) for _ in range(n)]
    samples = [
        GpuSample(
            time=float(i),
            index=0,
            name="NVIDIA GeForce RTX 3090",
            utilization_pct=util[i],
            memory_used_mb=round(rng.uniform(18432, 22528), 1),
            memory_total_mb=total_mb,
            power_w=round(300 + (util[i] - 90) * 5 + rng.uniform(-3, 0), 1),
            power_limit_w=350.0,
            temperature_c=float(rng.randint(72, 80)),
            processes=(),
        )
        for i in range(n)
    ]
    header = (
        "# Seed 001: NVIDIA GeForce RTX 3090 (24 GB) when tuned: utilisation 90-100%,\n"
        "# memory 18-22 GB, power 300-350 W (TDP 350 W). 60 samples at 1 s.\n"
    )
    return header, samples


def main() -> None:
    """Write every trace and print its summary, to check against the notes."""
    OUT.mkdir(parents=True, exist_ok=True)
    for name, build in [
        ("rtx4050_seed004.csv", rtx4050_seed004),
        ("rtx4060_seed000.csv", rtx4060_seed000),
        ("rtx3090_seed001.csv", rtx3090_seed001),
    ]:
        header, samples = build()
        samples = [
            GpuSample(
                **{
                    **s.__dict__,
                    "power_w": round(s.power_w, 1) if s.power_w is not None else None,
                    "memory_used_mb": round(s.memory_used_mb, 1)
                    if s.memory_used_mb is not None
                    else None,
                }
            )
            for s in samples
        ]
        path = OUT / name
        with path.open("w", encoding="utf-8", newline="") as stream:
            stream.write(header)
            TraceWriter(stream).write(samples)
        summary = summarize(read_trace(path))
        assert summary.utilization is not None
        assert summary.memory_used is not None
        assert summary.power_all is not None
        print(
            f"{name}: {summary.samples} samples; util mean {summary.utilization.mean:.2f} "
            f"min {summary.utilization.min:g} max {summary.utilization.max:g}; "
            f"memory peak {summary.memory_used.max:.1f} mean share "
            f"{summary.memory_mean_share:.4f}; power mean (all) {summary.power_all.mean:.2f} "
            f"min {summary.power_all.min:.1f} max {summary.power_all.max:.1f}; "
            f"dropped {len(summary.dropped)}"
        )


if __name__ == "__main__":
    main()
