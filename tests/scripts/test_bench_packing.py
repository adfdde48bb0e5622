"""The packing lab's workloads stay searches hpsearch accepts, the unseen ones too."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from hpsearch.config import load_config

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import bench_packing  # noqa: E402 - scripts/ is not a package


@pytest.mark.parametrize("name", [*bench_packing.WORKLOADS, *bench_packing.UNSEEN])
def test_each_lab_workload_is_a_config_hpsearch_accepts_in_every_mode(
    tmp_path: Path, name: str
) -> None:
    assert not set(bench_packing.WORKLOADS) & set(bench_packing.UNSEEN)  # one name, one load
    for mode in ("off", "auto", "fixed3", "fixed2x4"):
        path = tmp_path / f"{mode}.yaml"
        path.write_text(yaml.safe_dump(bench_packing.lab_config(name, mode, 4, 2, fusion=True)))
        config = load_config(path)
        assert config.telemetry.simulated is not None
        assert config.telemetry.simulated.gpus == 2
        assert config.study.n_trials == 4
