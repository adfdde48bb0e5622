"""Every GPU measurement hpsearch needs, in one call of at most ten minutes on an H100/H200.

Run on the lent GPU machine from the repository root, with the kit carried beside
it (``make gpu-kit`` builds ``.gpu/kit.tar.xz``; DEVELOPERS.md, "The GPU machine")::

    python3 scripts/gpu_evidence.py                  # unpack, then every step; results in $OUT
    python3 scripts/gpu_evidence.py --dry-run        # the same steps on CPU, tiny budgets

First ``unpack``: the kit goes to a temporary folder, a ``.pth`` file in the
interpreter's site-packages makes it and the repository visible to every process
(Ray's workers, the benches' children), and it is compiled once on every core.
Then the steps, in order of value, under one deadline (``--deadline``, 600 s): a
step that cannot finish before it (its limit past the time left) is skipped and
said; a step that fails or runs past its limit is recorded with its last lines and
the run goes on. Each prints a line per finished trial or measurement.

1. ``pytest-gpu``: ``pytest -m gpu``;
2. ``main-job``: ``configs/phase1-gpu.yaml`` with packing auto and off: time to the
   budget, best accuracy, the GPU's utilisation and SM activity (``bench_main_job.py``);
3. ``packing``: ``bench_packing.py --real``, the idle digits: off, auto, fixed 4/8,
   and Ray Tune with a static ``{"gpu": 1/8}`` on the same trials;
4. ``cold-start``: where a trial worker's first seconds go, alone and 8 at once
   (``bench_cold_start.py``);
5. ``sharing``: the CUDA context, time-slicing and MPS (``bench_sharing.py``);
6. ``fusion``: ``bench_fusion.py --real``;
7. ``gpm``: SM activity against NVML's utilisation (``bench_gpm.py``);
8. ``oom``: ``bench_oom.py --real --share 2``;
9. ``knobs``: ``bench_knobs.py --device cuda``.

On an H200 (2026-11-27) the first five took 9 s to unpack, then 22, 100-105, 122, 31
and 95 s: with ``--deadline 500`` one call covers them. Every result goes to
``$OUT/benchmarks/results/<name>-<date>-<gpu>.json``
(``$OUT`` unset: ``benchmarks/results/``), with ``gpu-evidence-<date>-<gpu>.json``
summing up: the GPU, driver and CUDA versions, each step's outcome and seconds,
and which targets passed. No step replaces ``PYTHONPATH`` for its children: they
extend it. The dry run writes under a temporary folder unless ``--out`` is
given, and fails (exit 1) if any step fails: ``make test`` runs it.
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
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
KIT = REPO / ".gpu" / "kit.tar.xz"
UNPACKED = Path(tempfile.gettempdir()) / "hpsearch-kit"
PTH = "hpsearch-kit.pth"
TAIL_LINES = 30
DEADLINE_S = 600.0


@dataclass(frozen=True)
class Step:
    """One measurement: its command on the GPU and on CPU (dry run), and their time limits."""

    name: str
    real: list[str]
    dry: list[str] | None
    """``None``: the step does not run on CPU (recorded as skipped)."""
    limit_s: float
    dry_limit_s: float = 90.0
    """A dry run's steps take 3-9 s alone, but run beside the rest of ``make test``: a
    slow hour on 2 cores made the sharing and fusion steps pass 30 s."""
    results: tuple[str, ...] = field(default=())
    """The result files it writes (names under the results folder, ``{tag}`` filled in)."""


def steps(results: Path, tag: str) -> list[Step]:
    """The kit's steps, in order of value, writing under ``results`` with ``tag`` in each name."""
    py = [sys.executable]

    def out(name: str) -> list[str]:
        return ["--out", str(results / f"{name}-{tag}.json")]

    pytest = [*py, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider"]
    return [
        Step("pytest-gpu", [*pytest, "tests"], [*pytest, "tests/test_gpu.py"], limit_s=45),
        Step(
            "main-job",
            [*py, "scripts/bench_main_job.py", *out("main-job")],
            # One mode on CPU: the step's plumbing (the GPU run compares auto with off),
            # on the simulated GPU, whose packing decisions it reads as on a real one
            # (and whose workers import no torch: 11 CPU-seconds where debug.yaml took 19).
            [
                *py,
                "scripts/bench_main_job.py",
                "--config",
                "configs/simulated.yaml",
                "--trials",
                "2",
                "--modes",
                "auto",
                *out("main-job"),
            ],
            limit_s=150,
            results=("main-job",),
        ),
        Step(
            "packing",
            [
                *py,
                "scripts/bench_packing.py",
                "--real",
                "--trials",
                "16",
                "--workloads",
                "idle-digits",
                "--modes",
                # On the H200 a mode took 24-43 s (its first trials' cold start
                # included): five fit the limit.
                "off,auto,fixed4,fixed8,ray-tune",
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
            limit_s=165,
            results=("packing",),
        ),
        Step(
            "cold-start",
            [*py, "scripts/bench_cold_start.py", *out("cold-start")],
            [
                *py,
                "scripts/bench_cold_start.py",
                "--device",
                "cpu",
                "--at-once",
                "1",
                "--epochs",
                "1",
                *out("cold-start"),
            ],
            limit_s=60,
            results=("cold-start",),
        ),
        Step(
            "sharing",
            [*py, "scripts/bench_sharing.py", "--real", "--seconds", "2", *out("sharing")],
            [*py, "scripts/bench_sharing.py", "--dry-run", *out("sharing")],
            limit_s=120,
            results=("sharing",),
        ),
        Step(
            "fusion",
            # Two shapes: on an H200 each took most of a minute (its worker processes'
            # cold start included), and the five ran past the limit after the first.
            [
                *py,
                "scripts/bench_fusion.py",
                "--real",
                "--seconds",
                "1",
                "--shapes",
                "32x1x16,256x2x64",
                *out("fusion"),
            ],
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
        Step("gpm", [*py, "scripts/bench_gpm.py", *out("gpm")], None, limit_s=30),
        Step(
            "oom",
            [
                *py,
                "scripts/bench_oom.py",
                "--real",
                "--share",
                "2",
                "--trials",
                "12",
                "--seeds",
                "0",
                "--samplers",
                "tpe",
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
            limit_s=90,
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
            limit_s=90,
            results=("knobs",),
        ),
    ]


def run_step(step: Step, dry: bool, env: dict[str, str], left_s: float) -> dict[str, Any]:
    """Run one step under its limit, if it can end before the deadline (``left_s`` away);
    its outcome, seconds and last lines. Its output is shown as it comes."""
    command = step.dry if dry else step.real
    if command is None:
        return {"outcome": "skipped", "why": "needs a GPU"}
    limit = step.dry_limit_s if dry else step.limit_s
    if limit > left_s:
        return {
            "outcome": "skipped",
            "why": (
                f"would not end before the deadline ({left_s:.0f} s left, its limit {limit:g} s)"
            ),
        }
    began = time.monotonic()
    lines: list[str] = []
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    reader = threading.Thread(target=_echo, args=(process, step.name, lines), daemon=True)
    reader.start()
    try:
        code = process.wait(timeout=limit)
        outcome = "passed" if code == 0 else "failed"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)  # the step's whole group: Ray, workers, servers
        process.wait()
        code, outcome = None, "timed out"
    reader.join(timeout=5)
    tail = lines[-TAIL_LINES:]
    return {
        "outcome": outcome,
        "exit_code": code,
        "seconds": round(time.monotonic() - began, 1),
        "limit_s": limit,
        "command": " ".join(command),
        "last_lines": tail if outcome != "passed" else tail[-5:],
    }


def _echo(process: subprocess.Popen[str], name: str, lines: list[str]) -> None:
    """Show a step's output as it comes (prefixed with its name), and keep it."""
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        print(f"  [{name}] {lines[-1]}", flush=True)


def unpack(kit: Path, into: Path, site_packages: Path | None) -> dict[str, Any]:
    """The kit, extracted into ``into``, visible to every process, compiled once.

    A ``.pth`` file in ``site_packages`` (the interpreter's) names the kit's site and
    the repository, so each Python process finds them whatever its ``PYTHONPATH``;
    where that folder cannot be written, the result says so and ``PYTHONPATH`` is
    extended instead (see :func:`child_environment`).
    """
    began = time.monotonic()
    if not kit.exists():
        return {"outcome": "failed", "why": f"no {kit.name} here: run make gpu-kit and carry it"}
    site = into / "site"
    if not site.is_dir():
        shutil.rmtree(into, ignore_errors=True)
        into.mkdir(parents=True)
        with tarfile.open(kit, "r:xz") as archive:
            archive.extractall(into, filter="data")
    result: dict[str, Any] = {"site": str(site), "pth": None}
    if site_packages is not None:
        try:
            (site_packages / PTH).write_text(f"{site}\n{REPO}\n", encoding="utf-8")
            result["pth"] = str(site_packages / PTH)
        except OSError as exc:
            result["why_no_pth"] = str(exc)
    compiled = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", str(site), str(REPO / "hpsearch")],
        capture_output=True,
        text=True,
        check=False,
    )
    result["compiled"] = compiled.returncode == 0
    return {**result, "outcome": "passed", "seconds": round(time.monotonic() - began, 1)}


def child_environment(unpacked: dict[str, Any] | None) -> dict[str, str]:
    """The steps' environment: ``PYTHONPATH`` extended (never replaced) with the repository,
    and with the kit's site where no ``.pth`` file names it."""
    paths = [str(REPO)]
    if unpacked is not None and unpacked.get("site") and not unpacked.get("pth"):
        paths.append(str(unpacked["site"]))
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
        "PYTHONUNBUFFERED": "1",
    }


def _site_packages() -> Path | None:
    """The interpreter's own site-packages (the first one), where a ``.pth`` file is read."""
    import site

    found = [Path(p) for p in site.getsitepackages() if Path(p).is_dir()]
    return found[0] if found else None


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
    parser.add_argument("--only", help="comma-separated step names (unpack always first)")
    parser.add_argument("--deadline", type=float, default=DEADLINE_S, help="seconds in all")
    parser.add_argument("--kit", type=Path, default=KIT)
    args = parser.parse_args()
    began = time.monotonic()
    root = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if root is None:
        root = Path(tempfile.mkdtemp(prefix="gpu-evidence-")) if args.dry_run else REPO
    results = root / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    outcomes: dict[str, Any] = {}
    if args.dry_run:
        # Here the venv has the stack: the kit is the test's (tests/scripts/test_gpu_kit.py).
        outcomes["unpack"] = {"outcome": "skipped", "why": "the dry run uses this venv"}
    else:
        outcomes["unpack"] = unpack(args.kit, UNPACKED, _site_packages())
    env = child_environment(outcomes["unpack"])
    print(f"unpack: {outcomes['unpack']['outcome']}", flush=True)
    facts = gpu_facts()
    where = facts.get("gpu") or "cpu-dry-run"
    tag = f"{time.strftime('%Y-%m-%d')}-{re.sub(r'[^a-z0-9]+', '-', where.lower()).strip('-')}"
    wanted = set(args.only.split(",")) if args.only else None
    verdicts: dict[str, bool] = {}
    for step in steps(results, tag):
        if wanted is not None and step.name not in wanted:
            continue
        left = args.deadline - (time.monotonic() - began)
        outcomes[step.name] = run_step(step, args.dry_run, env, left)
        verdicts.update(targets(results, tag, step))
        o = outcomes[step.name]
        print(
            f"{step.name}: {o['outcome']} ({o.get('seconds', 0)} s) {o.get('why', '')}", flush=True
        )
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
