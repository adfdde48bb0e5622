"""The GPU kit stays runnable: its payload, its dry run on CPU, and the calibration it feeds."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from hpsearch.config import load_config

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import gpu_calibrate  # noqa: E402 - scripts/ is not a package
import gpu_evidence  # noqa: E402
import gpu_kit  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402
from packaging.utils import canonicalize_name  # noqa: E402


def test_the_kits_closure_is_what_the_image_lacks_for_python_312() -> None:
    image = gpu_kit.image_packages()
    assert {"torch", "numpy", "pyarrow", "grpcio"} <= image  # the image's list, read
    pins = gpu_kit.pinned_closure(["hpsearch"], gpu_kit.target_environment("3.12"), image)
    assert {"ray", "optuna", "mlflow", "sqlalchemy", "alembic", "pydantic"} <= set(pins)
    assert not set(pins) & image  # nothing the image has travels
    assert pins["ray"] == metadata.version("ray")  # at this venv's pinned versions
    # A marker for another Python keeps its distribution out (or in) as it would there.
    assert (
        gpu_kit.applies(
            Requirement("tomli; python_version < '3.11'"),
            frozenset(),
            gpu_kit.target_environment("3.12"),
        )
        is False
    )


def test_the_kits_site_leaves_out_what_no_search_loads(tmp_path: Path) -> None:
    site = tmp_path / "site"
    for relative in ("ray/jars/ray.jar", "mlflow/server/js/build/app.js", "ray/__init__.py",
                     "optuna/__pycache__/x.cpython-312.pyc"):  # fmt: skip
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_text("x" * 100)
    (site / "bin").mkdir()
    (site / "bin" / "ray").write_text("#!/work/main/.venv/bin/python\nimport ray\n")
    assert gpu_kit.prune(site) == 300
    assert gpu_kit.fix_shebangs(site) == 1
    left = sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file())
    assert left == ["bin/ray", "ray/__init__.py"]
    assert (site / "bin" / "ray").read_text().startswith("#!/usr/bin/env python3\n")


def _image_stand_in(into: Path) -> Path:
    """A site-packages holding only the GPU image's distributions, linked from this venv."""
    into.mkdir()
    image = gpu_kit.image_packages()
    here = Path(str(metadata.distribution("pytest").locate_file("")))
    for dist in metadata.distributions():
        if canonicalize_name(dist.metadata["Name"]) not in image:
            continue
        for top in {Path(str(f)).parts[0] for f in dist.files or []}:
            if top != ".." and (here / top).exists() and not (into / top).exists():
                (into / top).symlink_to(here / top)
    return into


@pytest.mark.kit
@pytest.mark.process
def test_the_kit_fits_one_call_and_unpacks_to_a_site_where_the_stack_imports(
    tmp_path: Path,
) -> None:
    # The payload make gpu-kit builds: CPython 3.12, at most 55 MB.
    kit = gpu_evidence.KIT
    assert kit.exists(), "build it first: make gpu-kit"
    assert kit.stat().st_size <= gpu_kit.LIMIT_BYTES
    # The import check needs the image's distributions beside the kit: here only this
    # venv has them, for Python 3.11; so the same kit, built for 3.11, stands in.
    stand_in = gpu_kit.build(
        tmp_path / "kit-3.11", python=f"{sys.version_info[0]}.{sys.version_info[1]}"
    )
    image = _image_stand_in(tmp_path / "site-packages")
    unpacked = gpu_evidence.unpack(stand_in, tmp_path / "unpacked", image)
    assert unpacked["outcome"] == "passed", unpacked
    assert unpacked["compiled"], unpacked
    assert unpacked["pth"] == str(image / gpu_evidence.PTH)
    # A bare interpreter (-S: none of its own packages) that reads that site-packages
    # as the GPU machine's python3 reads its own: the .pth names the kit and the repo.
    check = (
        f"import site; site.addsitedir({str(image)!r}); "
        "import ray, optuna, mlflow, hpsearch, sqlalchemy, alembic, pydantic; "
        "print(hpsearch.__file__, ray.__file__)"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", check],
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    hpsearch_file, ray_file = done.stdout.split()
    assert hpsearch_file.startswith(str(REPO))  # the repository's code, carried beside
    assert ray_file.startswith(str(tmp_path / "unpacked"))  # the kit's, not this venv's


def test_the_kits_steps_run_in_the_order_of_value_it_promises(tmp_path: Path) -> None:
    names = [step.name for step in gpu_evidence.steps(tmp_path, "tag")]
    assert names == [
        "pytest-gpu", "main-job", "packing", "cold-start", "sharing", "fusion", "gpm", "oom",
        "knobs",
    ]  # fmt: skip
    # Only what needs a GPU has no dry run (and unpack: the dry run uses this venv).
    assert [step.name for step in gpu_evidence.steps(tmp_path, "tag") if step.dry is None] == [
        "gpm"
    ]


def test_each_packing_mode_the_gpu_step_runs_is_a_config_hpsearch_accepts(tmp_path: Path) -> None:
    # The GPU step's modes never run on CPU (no NVML): a mode the config refuses would
    # first show on the lent GPU, as fixed2 once did, and cost a call.
    import bench_packing

    (packing,) = [s for s in gpu_evidence.steps(tmp_path, "tag") if s.name == "packing"]
    modes = packing.real[packing.real.index("--modes") + 1].split(",")
    workload = packing.real[packing.real.index("--workloads") + 1]
    assert {"off", "auto", "fixed8", bench_packing.RAY_TUNE} <= set(modes)
    for mode in set(modes) - {bench_packing.RAY_TUNE}:
        path = tmp_path / f"{mode}.yaml"
        path.write_text(yaml.safe_dump(bench_packing.real_config(workload, mode, 16)))
        config = load_config(path)
        expected = "fixed" if mode.startswith("fixed") else mode
        assert config.packing.mode == expected
        if mode.startswith("fixed"):
            assert config.packing.trials_per_gpu == int(mode.removeprefix("fixed"))


@pytest.mark.process
@pytest.mark.parametrize(
    "only",
    # In three runs that the suite's workers share (one run of them all took 90-120 s).
    ["pytest-gpu,packing,oom,knobs", "main-job,cold-start", "sharing,fusion"],
)
def test_the_kits_dry_run_runs_each_step_on_cpu(tmp_path: Path, only: str) -> None:
    command = [sys.executable, "scripts/gpu_evidence.py", "--dry-run", "--only", only]
    done = subprocess.run(
        [*command, "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=400,  # a hang's backstop: each step has its own limit (90 s dry)
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [summary_path] = (tmp_path / "benchmarks" / "results").glob("gpu-evidence-*.json")
    summary = json.loads(summary_path.read_text())
    assert summary["dry_run"] is True
    outcomes = {name: step["outcome"] for name, step in summary["steps"].items()}
    assert outcomes == {"unpack": "skipped", **dict.fromkeys(only.split(","), "passed")}
    # The steps' results are where the summary says, and their targets are tallied.
    names = {p.name.split("-2")[0] for p in summary_path.parent.glob("*.json")}
    assert set(only.split(",")) - {"pytest-gpu"} <= names
    tallied = {name.split(":")[0] for name in summary["target_verdicts"]}
    assert tallied <= set(only.split(","))
    if "packing" in only:
        assert summary["targets"] >= 3
    if "main-job" in only:  # on the simulated GPU: packing's decisions were read back
        [main_job] = summary_path.parent.glob("main-job-*.json")
        auto = json.loads(main_job.read_text())["results"]["main-job"]["auto"]
        assert auto["complete"] == 2
        assert auto["packing"]["decisions"] >= 1


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
