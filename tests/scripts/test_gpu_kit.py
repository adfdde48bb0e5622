"""The GPU kit stays runnable: its dry run on CPU, and the calibration it feeds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpsearch.config import load_config

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import gpu_calibrate  # noqa: E402 - scripts/ is not a package


@pytest.mark.process
def test_the_kits_dry_run_runs_every_step_on_cpu(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "scripts/gpu_evidence.py", "--dry-run", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [summary_path] = (tmp_path / "benchmarks" / "results").glob("gpu-evidence-*.json")
    summary = json.loads(summary_path.read_text())
    assert summary["dry_run"] is True
    outcomes = {name: step["outcome"] for name, step in summary["steps"].items()}
    # Only what needs a GPU (or a wheelhouse not built here) is skipped; the rest ran.
    assert {n for n, o in outcomes.items() if o == "skipped"} <= {"install", "gpm", "packing-mps"}
    assert {n for n, o in outcomes.items() if o == "passed"} >= {
        "pytest-gpu", "monitor", "sharing", "packing", "oom", "knobs", "fusion", "main-job"
    }  # fmt: skip
    # The steps' results are where the summary says, and their targets are tallied.
    names = {p.name.split("-2")[0] for p in summary_path.parent.glob("*.json")}
    assert {"sharing", "packing", "oom", "knobs", "fusion", "monitor"} <= names
    assert summary["targets"] >= 3


def test_calibration_round_trips_a_gpu_runs_constants(tmp_path: Path) -> None:
    measured = {
        "date": "2026-11-24",
        "device": "NVIDIA H100 80GB HBM3",
        "dry_run": False,
        "results": {
            "memory_total_mb": 81559.0,
            "context": {"context_mb": 523.5},
            "time_sliced_filling": {"switch_cost": 0.021},
            "time_sliced_small": {"switch_cost": 0.0},
            "mps": {"mps_max_speedup": 2.31, "filling": {"switch_cost": 0.008}},
        },
    }
    source = tmp_path / "sharing-2026-11-24-nvidia-h100.json"
    source.write_text(json.dumps(measured))
    written = gpu_calibrate.write(source, tmp_path / "calibration")
    text = written.read_text()
    assert str(source) in text  # it cites the file it came from
    assert "context_mb for this GPU: 523.5" in text
    # The fragment, pasted into a config, is a valid config: what a lab run reads.
    body = {
        "study": {"name": "h100-lab", "n_trials": 8},
        "train": "hpsearch.workloads.simulated_gpu:train",
        "space": {"lr": [0.01]},
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
    }
    config_path = tmp_path / "lab.yaml"
    config_path.write_text(yaml.safe_dump({**body, **yaml.safe_load(text)}))
    config = load_config(config_path)
    simulated = config.telemetry.simulated
    assert simulated is not None
    assert simulated.memory_total_mb == 81559.0
    assert simulated.name == "Simulated NVIDIA H100 80GB HBM3"
    sharing = simulated.sharing
    assert (sharing.switch_cost, sharing.mps_switch_cost, sharing.mps_max_speedup) == (
        0.021,
        0.008,
        2.31,
    )


def test_an_unmeasured_constant_keeps_its_default_and_a_dry_run_is_refused(
    tmp_path: Path,
) -> None:
    measured = {
        "device": "NVIDIA L4",
        "dry_run": False,
        "results": {
            "context": {"context_mb": None},
            "time_sliced_filling": {"switch_cost": 0.05},
            "mps": {"skipped": "nvidia-cuda-mps-control not found"},
        },
    }
    source = tmp_path / "sharing.json"
    source.write_text(json.dumps(measured))
    fragment = yaml.safe_load(gpu_calibrate.write(source, tmp_path).read_text())
    assert fragment["telemetry"]["simulated"]["sharing"] == {"switch_cost": 0.05}
    source.write_text(json.dumps({**measured, "dry_run": True}))
    with pytest.raises(SystemExit, match="dry run"):
        gpu_calibrate.write(source, tmp_path)


def test_the_simulators_defaults_are_what_make_gpu_calibrate_writes_from_the_h200_run(
    tmp_path: Path,
) -> None:
    from hpsearch.simulation import CUDA_CONTEXT_MB, SharingSpec

    # The sharing file of the 2026-11-26 H200 run (shared/gpu-evidence), kept in the repo.
    source = REPO / "benchmarks" / "results" / "sharing-2026-11-26-nvidia-h200.json"
    fragment = yaml.safe_load(gpu_calibrate.write(source, tmp_path).read_text())
    sharing = fragment["telemetry"]["simulated"]["sharing"]
    defaults = SharingSpec()
    # 2, 4 and 8 GPU-filling processes kept 0.894: a contention loss of 0.106.
    assert sharing["switch_cost"] == defaults.switch_cost == 0.106
    assert sharing["mps_switch_cost"] == defaults.mps_switch_cost == 0.0
    assert sharing["mps_max_speedup"] == pytest.approx(defaults.mps_max_speedup, abs=0.005)
    measured = json.loads(source.read_text())["results"]["context"]["context_mb"]
    assert measured == CUDA_CONTEXT_MB == 610.0
