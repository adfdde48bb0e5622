"""The sharing model's constants from a GPU run of ``bench_sharing.py``, as a config fragment.

Reads ``benchmarks/results/sharing-<date>-<gpu>.json`` (what the GPU kit's
``sharing`` step writes) and writes ``benchmarks/calibration/<gpu>.yaml``: the
``telemetry.simulated`` section of a config that simulates that GPU with the
measured constants (``sharing.switch_cost``, ``mps_switch_cost``,
``mps_max_speedup``, and the GPU's size), and the ``context_mb`` the simulated
workload should use, each with the file it came from. A config takes it with
``telemetry: {backend: simulated, simulated: ...}`` pasted in, so a lab run
models that GPU instead of the defaults. What the run did not measure (MPS where
no daemon was installed) is left out, so the defaults stand for it.

    make gpu-calibrate RESULTS=benchmarks/results/sharing-2026-11-24-nvidia-h100-80gb-hbm3.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import yaml
from bench_sharing import contention_loss  # scripts/ is on the path when a script runs

REPO = Path(__file__).resolve().parents[1]


def constants(results: dict[str, Any]) -> dict[str, Any]:
    """The measured constants in a ``bench_sharing`` payload (``None``: not measured)."""
    if results.get("dry_run"):
        raise SystemExit("a dry run measured no GPU: calibrate from a --real run's file")
    figures = results["results"]
    mps = figures.get("mps", {})
    return {
        "name": results["device"],
        "memory_total_mb": figures.get("memory_total_mb"),
        "context_mb": figures["context"].get("context_mb"),
        "switch_cost": _switch_cost(figures["time_sliced_filling"]),
        "mps_switch_cost": _switch_cost(mps.get("filling", {})),
        "mps_max_speedup": mps.get("mps_max_speedup"),
    }


def _switch_cost(measured: dict[str, Any]) -> float | None:
    """The model's switch cost, from the measured aggregates where the file has them (a file
    written before the model's switch cost was a contention loss kept a per-process cost)."""
    per_count = measured.get("per_count")
    cost = contention_loss(per_count) if per_count else measured.get("switch_cost")
    return None if cost is None else round(float(cost), 3)


def fragment(measured: dict[str, Any]) -> dict[str, Any]:
    """``telemetry.simulated`` with the measured constants; unmeasured ones left out."""
    sharing = {
        key: measured[key]
        for key in ("switch_cost", "mps_switch_cost", "mps_max_speedup")
        if measured.get(key) is not None
    }
    simulated: dict[str, Any] = {"name": f"Simulated {measured['name']}", "sharing": sharing}
    if measured.get("memory_total_mb") is not None:
        simulated["memory_total_mb"] = measured["memory_total_mb"]
    return {"telemetry": {"backend": "simulated", "simulated": simulated}}


def write(results_path: Path, out_dir: Path) -> Path:
    """Write the calibration of ``results_path``; its path."""
    measured = constants(json.loads(results_path.read_text(encoding="utf-8")))
    body = fragment(measured)
    slug = re.sub(r"[^a-z0-9]+", "-", str(measured["name"]).lower()).strip("-")
    out = out_dir / f"{slug}.yaml"
    out_dir.mkdir(parents=True, exist_ok=True)
    source = results_path.resolve()
    cited = source.relative_to(REPO) if source.is_relative_to(REPO) else source
    header = [
        f"# The sharing model calibrated on a {measured['name']}.",
        f"# Measured by scripts/bench_sharing.py --real: {cited}",
        "# Written by scripts/gpu_calibrate.py (make gpu-calibrate); do not edit by hand.",
    ]
    if measured.get("context_mb") is not None:
        header.append(
            f"# The simulated workload's context_mb for this GPU: {measured['context_mb']}"
            " (space: {context_mb: ...})"
        )
    out.write_text("\n".join(header) + "\n" + yaml.safe_dump(body, sort_keys=False), "utf-8")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a sharing-*.json from bench_sharing --real")
    parser.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "calibration")
    args = parser.parse_args()
    print(f"wrote {write(args.results, args.out_dir)}")


if __name__ == "__main__":
    main()
