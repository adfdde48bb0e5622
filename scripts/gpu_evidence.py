"""Every GPU measurement hpsearch needs, in one command, within 25 minutes of an H100.

Run on the lent GPU machine from the repository root, after the wheelhouse parts
(``make gpu-wheelhouse``, see DEVELOPERS.md) have been carried over::

    python scripts/gpu_evidence.py              # install, then every step; results in $OUT
    python scripts/gpu_evidence.py --dry-run    # the same steps on CPU, simulated, < 60 s

Steps, in order, each with its own time limit (a step that fails or runs past
it is recorded as failed, with its last lines, and the run goes on):

1. ``install``: join ``.gpu/parts/wheelhouse.tar.part-*``, ``pip install --no-index``;
2. ``pytest-gpu``: ``pytest -m gpu``;
3. ``gpm``: NVML's utilisation against GPM SM activity (``bench_gpm.py``);
4. ``monitor``: the NVML monitor's cost (``bench_monitor.py``);
5. ``sharing``: the CUDA context's size and the slowdown of 2/4/8 time-sliced
   trials, with and without MPS (``bench_sharing.py``): the sharing model's constants;
6. ``packing`` and ``packing-mps``: ``bench_packing.py --real`` (idle and
   filling workloads; off, auto, fixed 2/4/8; and auto, fixed 4 under MPS);
7. ``oom``: ``bench_oom.py --real --share 2``;
8. ``knobs``: ``bench_knobs.py --device cuda``;
9. ``fusion``: ``bench_fusion.py --real``;
10. ``main-job``: ``configs/phase1-gpu.yaml``, the main job's GPU variant.

Every result goes to ``$OUT/benchmarks/results/<name>-<date>-<gpu>.json``
(``$OUT`` unset: ``benchmarks/results/``), with ``gpu-evidence-<date>-<gpu>.json``
summing up: the GPU's name, driver and CUDA versions, each step's outcome and
seconds, and which targets passed. The dry run writes under a temporary folder
unless ``--out`` is given, runs the lab and CPU variants with tiny budgets, and
fails (exit 1) if any step fails: ``make test`` runs it, so the kit never rots.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PARTS = REPO / ".gpu" / "parts"
TAIL_LINES = 30


@dataclass(frozen=True)
class Step:
    """One measurement: its command on the GPU and on CPU (dry run), and their time limits."""

    name: str
    real: list[str]
    dry: list[str] | None
    """``None``: the step does not run on CPU (recorded as skipped)."""
    limit_s: float
    dry_limit_s: float = 30.0
    results: tuple[str, ...] = field(default=())
    """The result files it writes (names under the results folder, ``{tag}`` filled in)."""


def steps(results: Path, tag: str) -> list[Step]:
    """The kit's steps, writing under ``results`` with ``tag`` (date and GPU) in each name."""
    py = [sys.executable]

    def out(name: str) -> list[str]:
        return ["--out", str(results / f"{name}-{tag}.json")]

    return [
        Step(
            "pytest-gpu",
            [*py, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests"],
            [*py, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests/test_gpu.py"],
            limit_s=90,
        ),
        Step("gpm", [*py, "scripts/bench_gpm.py", *out("gpm")], None, limit_s=45),
        Step(
            "monitor",
            [
                *py,
                "scripts/bench_monitor.py",
                "--duration",
                "15",
                "--calls",
                "300",
                *out("monitor"),
            ],
            [
                *py,
                "scripts/bench_monitor.py",
                "--duration",
                "0.5",
                "--calls",
                "20",
                *out("monitor"),
            ],
            limit_s=60,
            results=("monitor",),
        ),
        Step(
            "sharing",
            [*py, "scripts/bench_sharing.py", "--real", *out("sharing")],
            [*py, "scripts/bench_sharing.py", "--dry-run", *out("sharing")],
            limit_s=120,
            results=("sharing",),
        ),
        Step(
            "packing",
            [
                *py,
                "scripts/bench_packing.py",
                "--real",
                "--trials",
                "12",
                "--modes",
                "off,auto,fixed2,fixed4,fixed8",
                *out("packing"),
            ],
            [
                *py,
                "scripts/bench_packing.py",
                "--trials",
                "6",
                "--workloads",
                "rtx4050-idle",
                "--gpus",
                "1",
                "--modes",
                "off,auto,fixed1,fixed4",
                *out("packing"),
            ],
            limit_s=300,
            results=("packing",),
        ),
        Step(
            "packing-mps",
            [
                *py,
                "scripts/bench_packing.py",
                "--real",
                "--mps",
                "--trials",
                "12",
                "--workloads",
                "idle-digits",
                "--modes",
                "auto,fixed4",
                *out("packing-mps"),
            ],
            None,
            limit_s=120,
            results=("packing-mps",),
        ),
        Step(
            "oom",
            [
                *py,
                "scripts/bench_oom.py",
                "--real",
                "--share",
                "2",
                "--trials",
                "24",
                "--seeds",
                "0,1",
                *out("oom"),
            ],
            [
                *py,
                "scripts/bench_oom.py",
                "--lab",
                "--share",
                "2",
                "--trials",
                "8",
                "--seeds",
                "0",
                *out("oom"),
            ],
            limit_s=180,
            results=("oom",),
        ),
        Step(
            "knobs",
            [*py, "scripts/bench_knobs.py", "--device", "cuda", *out("knobs")],
            [
                *py,
                "scripts/bench_knobs.py",
                "--device",
                "cpu",
                "--workload",
                "digits",
                "--epochs",
                "1",
                "--settings",
                "baseline,precision=bf16",
                *out("knobs"),
            ],
            limit_s=120,
            results=("knobs",),
        ),
        Step(
            "fusion",
            [*py, "scripts/bench_fusion.py", "--real", "--seconds", "1.5", *out("fusion")],
            [
                *py,
                "scripts/bench_fusion.py",
                "--seconds",
                "0.05",
                "--shapes",
                "32x1x16",
                "--counts",
                "2",
                "--quick",
                "--no-extras",
                *out("fusion"),
            ],
            limit_s=120,
            results=("fusion",),
        ),
        Step(
            "main-job",
            [*py, "-m", "hpsearch", "run", "configs/phase1-gpu.yaml"],
            [*py, "-m", "hpsearch", "validate", "configs/phase1-gpu.yaml"],
            limit_s=210,
        ),
    ]


def run_step(step: Step, dry: bool, env: dict[str, str]) -> dict[str, Any]:
    """Run one step under its limit; its outcome, seconds and last lines."""
    command = step.dry if dry else step.real
    if command is None:
        return {"outcome": "skipped", "why": "needs a GPU"}
    limit = step.dry_limit_s if dry else step.limit_s
    began = time.monotonic()
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = process.wait(timeout=limit)
            outcome = "passed" if code == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)  # the step's whole group: Ray, workers, servers
            process.wait()
            code, outcome = None, "timed out"
        log.seek(0)
        tail = log.read().splitlines()[-TAIL_LINES:]
    return {
        "outcome": outcome,
        "exit_code": code,
        "seconds": round(time.monotonic() - began, 1),
        "limit_s": limit,
        "command": " ".join(command),
        "last_lines": tail if outcome != "passed" else tail[-5:],
    }


def install(dry: bool, env: dict[str, str]) -> dict[str, Any]:
    """Join the wheelhouse parts and install from them, offline (dry run: join and list)."""
    if not dry and _installed():
        return {"outcome": "passed", "why": "already installed (an earlier call of this run)"}
    parts = sorted(PARTS.glob("wheelhouse.tar.part-*"))
    if not parts:
        return {
            "outcome": "skipped" if dry else "failed",
            "why": f"no parts under {PARTS.relative_to(REPO)}: run make gpu-wheelhouse",
        }
    began = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="hpsearch-wheelhouse-"))
    joined = folder / "wheelhouse.tar"
    with joined.open("wb") as whole:
        for part in parts:
            whole.write(part.read_bytes())
    with tarfile.open(joined) as tar:
        tar.extractall(folder, filter="data")
    wheels = sorted((folder / "wh").glob("*.whl"))
    own = [w.name for w in wheels if w.name.startswith("hpsearch-")]
    result: dict[str, Any] = {"parts": len(parts), "wheels": len(wheels), "own_wheel": own}
    if dry:
        shutil.rmtree(folder, ignore_errors=True)
        outcome = "passed" if own else "failed"
        return {**result, "outcome": outcome, "seconds": round(time.monotonic() - began, 1)}
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--find-links",
         str(folder / "wh"), str(folder / "wh" / own[0]), "pytest", "pytest-timeout"],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    shutil.rmtree(folder, ignore_errors=True)
    return {
        **result,
        "outcome": "passed" if done.returncode == 0 else "failed",
        "seconds": round(time.monotonic() - began, 1),
        "last_lines": (done.stdout + done.stderr).splitlines()[-TAIL_LINES:],
    }


def _installed() -> bool:
    """Whether the wheelhouse's distributions are installed already."""
    import importlib.metadata

    try:
        for name in ("hpsearch", "ray", "optuna", "mlflow", "pytest"):
            importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def gpu_facts() -> dict[str, Any]:
    """The GPU's name, memory, driver and CUDA versions (``{}`` without NVML)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no GPU: the dry run's case
        return {"gpu": None, "why": str(exc)}
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        facts: dict[str, Any] = {
            "gpu": name.decode() if isinstance(name, bytes) else name,
            "memory_total_mb": round(pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**20),
            "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
            "cuda_driver": pynvml.nvmlSystemGetCudaDriverVersion_v2(),
        }
    finally:
        pynvml.nvmlShutdown()
    try:
        import torch

        facts["torch"] = torch.__version__
        facts["torch_cuda"] = torch.version.cuda
    except ImportError:
        pass
    return facts


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def targets(results: Path, tag: str, step: Step) -> dict[str, bool]:
    """The ``target_*`` verdicts in a step's result files."""
    verdicts: dict[str, bool] = {}
    for name in step.results:
        path = results / f"{name}-{tag}.json"
        if not path.exists():
            continue
        payload = json.loads(path.read_text(encoding="utf-8"))
        results_of = payload.get("results")
        if not isinstance(results_of, dict):
            continue  # a list of measurements (knobs): figures, no verdicts
        for key, result in results_of.items():
            if isinstance(result, dict):
                for verdict, passed in result.items():
                    if verdict.startswith("target_") and isinstance(passed, bool):
                        verdicts[f"{name}: {key}: {verdict}"] = passed
    return verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="on CPU, simulated, tiny budgets")
    parser.add_argument("--out", type=Path, help="folder for benchmarks/results (default $OUT)")
    parser.add_argument("--only", help="comma-separated step names (install always first)")
    args = parser.parse_args()
    root = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if root is None:
        root = Path(tempfile.mkdtemp(prefix="gpu-evidence-")) if args.dry_run else REPO
    results = root / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    began = time.monotonic()
    outcomes: dict[str, Any] = {"install": install(args.dry_run, env)}
    print(f"install: {outcomes['install']['outcome']}", flush=True)
    facts = gpu_facts()
    where = facts.get("gpu") or "cpu-dry-run"
    tag = f"{time.strftime('%Y-%m-%d')}-{re.sub(r'[^a-z0-9]+', '-', where.lower()).strip('-')}"
    wanted = set(args.only.split(",")) if args.only else None
    verdicts: dict[str, bool] = {}
    for step in steps(results, tag):
        if wanted is not None and step.name not in wanted:
            continue
        outcomes[step.name] = run_step(step, args.dry_run, env)
        verdicts.update(targets(results, tag, step))
        o = outcomes[step.name]
        print(f"{step.name}: {o['outcome']} ({o.get('seconds', 0)} s)", flush=True)
        if o["outcome"] in {"failed", "timed out"}:
            print("  " + "\n  ".join(o["last_lines"][-8:]), flush=True)
    failed = [n for n, o in outcomes.items() if o["outcome"] in {"failed", "timed out"}]
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "dry_run": args.dry_run,
        **facts,
        "seconds": round(time.monotonic() - began, 1),
        "steps": outcomes,
        "failed_steps": failed,
        "targets_passed": sum(verdicts.values()),
        "targets": len(verdicts),
        "target_verdicts": verdicts,
        "missed": [name for name, passed in verdicts.items() if not passed],
    }
    out = results / f"gpu-evidence-{tag}.json"
    out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(
        f"{len(outcomes) - len(failed)} of {len(outcomes)} steps ran; "
        f"targets {summary['targets_passed']}/{summary['targets']}; {summary['seconds']} s; {out}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
