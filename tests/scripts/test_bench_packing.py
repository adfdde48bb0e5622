"""The packing lab's workloads stay searches hpsearch accepts, the unseen ones too, and an
update reruns only what it names."""

from __future__ import annotations

import json
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


def test_an_update_reruns_auto_judges_again_and_keeps_the_fixed_counts(tmp_path: Path) -> None:
    name, trials = "short-3s", 6
    modes = {
        mode: bench_packing.run(bench_packing.lab_config(name, mode, trials, 1), simulated=True)
        for mode in ("off", "auto", "fixed2")
    }
    fresh_auto = modes["auto"]["work_per_s"]
    modes["auto"] = {**modes["auto"], "work_per_s": fresh_auto / 100}  # as a bad policy ran
    result = {"workload": "3 s trials", "modes": modes, **bench_packing.judge(name, modes)}
    assert result["target_auto_at_most_3pct_slower_than_off"] is False
    path = tmp_path / "lab.json"
    payload = {"trials": {name: trials}, "fusion": False, "results": {f"{name}-1gpu": result}}
    path.write_text(json.dumps(payload))

    bench_packing.update(path, None, None, None)

    updated = json.loads(path.read_text())
    again = updated["results"][f"{name}-1gpu"]
    assert again["modes"]["auto"]["work_per_s"] == fresh_auto  # rerun: the simulator is exact
    assert again["modes"]["fixed2"] == modes["fixed2"]
    assert again["modes"]["off"] == modes["off"]
    assert again["target_auto_at_most_3pct_slower_than_off"] is True
    assert not any("auto_at_most" in missed for missed in updated["missed"])
    assert updated["note"].startswith("auto rerun on ")
