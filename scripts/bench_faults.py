"""The fault suite as a benchmark: every fault in ``tests/faults`` tried, and what it cost.

Runs ``pytest tests/faults`` (real processes, real signals, a real tmpfs where
this user may mount one) and writes ``benchmarks/results/faults-<date>.json``:
per fault, whether the search came through (each test asserts its outcome and
that no completed trial was lost, so a fault survived is one with none lost),
how long it took, and for the driver killed and rerun at once, how long the
rerun took against the heartbeat grace (the longest it may wait before it
reclaims the dead driver's trials).

Targets: every fault survived; no trial lost; no stall longer than the grace + 10 s.

    python scripts/bench_faults.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from bench_oom import REPO, result_path  # scripts/ is on the path when a script runs

FIGURES_ENV = "HPSEARCH_FAULT_FIGURES"
"""Where fault tests append their figures (JSON lines), when set."""


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "faults.xml"
        figures = Path(scratch) / "figures.jsonl"
        started = time.monotonic()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "tests/faults",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--junitxml={report}",
            ],
            cwd=REPO,
            env={**os.environ, FIGURES_ENV: str(figures)},
            check=False,
        )
        wall = time.monotonic() - started
        faults = _faults(report)
        extra = (
            [json.loads(line) for line in figures.read_text().splitlines()]
            if figures.exists()
            else []
        )
    tried = [f for f in faults if f["outcome"] != "skipped"]
    survived = [f for f in tried if f["outcome"] == "passed"]
    stalls = [x for x in extra if "rerun_s" in x]
    payload: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} CPUs, no GPU",
        "wall_s": round(wall, 1),
        "faults_tried": len(tried),
        "faults_survived": len(survived),
        "faults_skipped": [f["fault"] for f in faults if f["outcome"] == "skipped"],
        "trials_lost": 0 if len(survived) == len(tried) else None,
        "stalls": stalls,
        "figures": [x for x in extra if "rerun_s" not in x],
        "target_every_fault_survived": len(survived) == len(tried),
        "target_no_stall_past_grace_plus_10s": all(
            x["rerun_s"] - x["work_s"] <= x["grace_s"] + 10 for x in stalls
        ),
        "faults": faults,
    }
    out = result_path("faults", None).with_name(f"faults-{payload['date']}.json")
    out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    for fault in faults:
        print(f"{fault['outcome']:8} {fault['seconds']:6.1f} s  {fault['fault']}")
    print(f"wrote {out}")


def _faults(report: Path) -> list[dict[str, Any]]:
    """Each test case of the JUnit report: its fault (module and test), outcome and time."""
    faults = []
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        module = case.get("classname", "").rsplit(".", 1)[-1].removeprefix("test_")
        name = case.get("name", "").removeprefix("test_").replace("_", " ")
        faults.append(
            {
                "fault": f"{module}: {name}",
                "outcome": outcome,
                "seconds": round(float(case.get("time", 0.0)), 1),
            }
        )
    return faults


if __name__ == "__main__":
    main()
