"""The suite's own speed: ``make test`` on a fresh clone, or ``make check`` here, timed.

The targets (the "A root that only wires" issue): ``make test`` within 8 minutes on a
fresh clone of this machine, set-up included, measured three times; ``make check``
within 90 s. Each ``test`` run clones the committed ``HEAD`` into a temporary folder
and runs ``bash .ci/run`` there (what CI runs: set-up, ruff, mypy and every test);
each ``check`` run runs ``make check`` in this checkout, its set-up done.

A run records its wall seconds, pytest's own seconds and counts (its summary line),
the exit code, and a 10-million-add Python loop timed just before and just after:
this machine's speed has varied 2-3x within a day, and the loop shows most of it (not
all: the suite's processes also wait on the disk and on each other). The runs are
added to ``benchmarks/results/suite-<date>-cpu.json``; each is judged alone, and a run
that failed meets no target however fast it was.

    python scripts/bench_suite.py                   # one make test on a fresh clone
    python scripts/bench_suite.py --runs 3
    python scripts/bench_suite.py --target check --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LOGS = Path(tempfile.gettempdir()) / "hpsearch-suite-logs"
"""Where each run's whole output is kept (its path is printed, not recorded)."""
TARGET_S = {"test": 480.0, "check": 90.0}
"""Each target's bound in seconds: ``make test`` 8 min, ``make check`` 90 s."""
LOOP = (
    "import time\nt = time.perf_counter()\ns = 0\n"
    "for i in range(10_000_000): s += i\nprint(time.perf_counter() - t)"
)
# "== 1112 passed, 6 skipped in 606.06s (0:10:06) ==", or under -q (make check) bare.
_SUMMARY = re.compile(
    r"^(?:=+ )?(?P<counts>\d+ [a-z]+(?:, \d+ [a-z]+)*) in (?P<seconds>[\d.]+)s\b", re.MULTILINE
)
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


def pytest_summary(output: str) -> dict[str, Any]:
    """pytest's last summary line in ``output``: its seconds and counts (empty: none found).

    ``1112 passed, 6 skipped in 606.06s (0:10:06)`` →
    ``{"pytest_s": 606.06, "passed": 1112, "skipped": 6}``; ``error``/``errors`` both
    count as ``errors``.
    """
    found = _SUMMARY.findall(output)
    if not found:
        return {}
    counts, seconds = found[-1]
    summary: dict[str, Any] = {"pytest_s": float(seconds)}
    for number, word in _COUNT.findall(counts):
        summary["errors" if word.startswith("error") else word] = int(number)
    return summary


def verdict_key(target: str) -> str:
    """The key of a run's verdict on ``target`` (``target_at_most_480s``)."""
    return f"target_at_most_{TARGET_S[target]:.0f}s"


def judged(run: dict[str, Any]) -> dict[str, Any]:
    """``run`` with its verdict: within its target's bound, and every test passed."""
    within = run["wall_s"] <= TARGET_S[run["target"]]
    return {**run, verdict_key(run["target"]): _passed(run) and within}


def merged(
    previous: dict[str, Any] | None, runs: list[dict[str, Any]], date: str
) -> dict[str, Any]:
    """The day's result file: ``previous`` (that file, if any) with ``runs`` added after
    its own, each named by its target and number (``test-1``, ``check-2``), and the
    verdicts counted over them all."""
    results: dict[str, Any] = dict((previous or {}).get("results", {}))
    for run in runs:
        number = 1 + sum(1 for r in results.values() if r["target"] == run["target"])
        results[f"{run['target']}-{number}"] = judged(run)
    verdicts = {name: run[verdict_key(run["target"])] for name, run in results.items()}
    return {
        "date": date,
        "device": f"this machine: {os.cpu_count()} cores, no GPU",
        "cpu_count": os.cpu_count(),
        "targets_passed": sum(verdicts.values()),
        "targets": len(verdicts),
        "missed": [
            f"{name}: {run['wall_s']:.0f} s, exit {run['exit_code']}"
            for name, run in results.items()
            if not verdicts[name]
        ],
        "summary": {target: _summary(results, target) for target in TARGET_S},
        "results": results,
        **({"note": previous["note"]} if previous and "note" in previous else {}),
    }


def _summary(results: dict[str, Any], target: str) -> dict[str, Any]:
    """One target's runs of the day: how many, how many passed and how many met it, and
    the fastest and slowest of those that passed (a failed run's time says little)."""
    runs = [r for r in results.values() if r["target"] == target]
    passed = sorted(r["wall_s"] for r in runs if _passed(r))
    verdict = verdict_key(target)
    met = sum(r[verdict] is True for r in runs)
    summary: dict[str, Any] = {"runs": len(runs), "passed": len(passed), "met": met}
    if passed:
        summary |= {"fastest_s": passed[0], "slowest_s": passed[-1]}
    if len(runs) >= 3:  # the "measured three times": the latest three, in a row
        last = runs[-3:]
        summary["last_three_s"] = [r["wall_s"] for r in last]
        summary["last_three_within"] = all(r[verdict] is True for r in last)
    return summary


def _passed(run: dict[str, Any]) -> bool:
    """Whether every test of ``run`` passed (its command ended well, none failed)."""
    return bool(run["exit_code"] == 0 and not run.get("failed") and not run.get("errors"))


def loop_seconds() -> float:
    """This machine's speed now: a 10-million-add Python loop's seconds."""
    done = subprocess.run([sys.executable, "-c", LOOP], capture_output=True, text=True, check=True)
    return round(float(done.stdout), 3)


def run_once(target: str, scratch: Path) -> dict[str, Any]:
    """One timed run of ``target`` (``test``: on a fresh clone under ``scratch``)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if target == "test":
        where = scratch / f"clone-{time.time_ns()}"
        subprocess.run(["git", "clone", "-q", str(REPO), str(where)], check=True)
        command = ["bash", ".ci/run"]
    else:
        where, command = REPO, ["make", "check"]
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    before = loop_seconds()
    started = time.monotonic()
    done = subprocess.run(command, cwd=where, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    output = done.stdout + done.stderr
    run = {
        "target": target,
        "command": " ".join(command) + (" (a fresh clone)" if target == "test" else ""),
        "commit": commit,
        "ended": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "wall_s": round(wall, 1),
        "exit_code": done.returncode,
        **pytest_summary(output),
        "loop_before_s": before,
        "loop_after_s": loop_seconds(),
    }
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{target}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    log.write_text(output, encoding="utf-8")
    print(f"  its output: {log}", flush=True)
    if done.returncode != 0:  # which tests, and how it ended (pytest's lines are on stdout)
        ends = ("FAILED ", "ERROR ")
        run["not_passed"] = [line for line in done.stdout.splitlines() if line.startswith(ends)]
        run["output_tail"] = done.stdout[-2000:]
    if target == "test":
        shutil.rmtree(where, ignore_errors=True)  # its venv: 2 GB a clone
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=sorted(TARGET_S), default="test")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--out", type=Path, help="default: results/suite-<date>-cpu.json")
    args = parser.parse_args()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    if dirty and args.target == "test":
        print("note: uncommitted changes are not in the clone; it runs HEAD", file=sys.stderr)
    date = time.strftime("%Y-%m-%d")
    out = args.out or REPO / "benchmarks" / "results" / f"suite-{date}-cpu.json"
    with tempfile.TemporaryDirectory(prefix="hpsearch-suite-") as scratch:
        for number in range(1, args.runs + 1):
            run = run_once(args.target, Path(scratch))
            previous = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else None
            payload = merged(previous, [run], date)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
            tests = ", ".join(f"{run[k]} {k}" for k in ("passed", "failed", "skipped") if k in run)
            print(
                f"{args.target} run {number}: {run['wall_s']:.1f} s (pytest "
                f"{run.get('pytest_s', 0):.1f} s; {tests or 'no summary'}), exit "
                f"{run['exit_code']}, the loop {run['loop_before_s']} s → {run['loop_after_s']} s",
                flush=True,
            )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
