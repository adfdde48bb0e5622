"""The packing lab's record: a search kept in memory (study and runs) against one on disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from click.testing import CliRunner

import hpsearch
from hpsearch import attrs
from hpsearch.cli import main as cli_main
from hpsearch.config import DEFAULT_STUDY_STORAGE
from hpsearch.runner import SimulatedRunner
from hpsearch.tracking import PARENT_TAG, MemoryTracker
from tests.conftest import ConfigWriter, load_search, mlflow_client

pytestmark = pytest.mark.usefixtures("seeded_store")


def _last_values(metrics: list[tuple[str, float, int]]) -> dict[str, float]:
    """Each metric's value at its highest step (MLflow's ``run.data.metrics``)."""
    latest: dict[str, tuple[int, float]] = {}
    for name, value, step in metrics:
        if name not in latest or step >= latest[name][0]:
            latest[name] = (step, value)
    return {name: value for name, (_, value) in latest.items()}


def _untimed(decisions: str) -> list[dict[str, Any]]:
    """Packing decisions without their times (each clock starts at its run's start)."""
    return [{k: v for k, v in d.items() if k != "time"} for d in json.loads(decisions)]


def test_a_search_kept_in_memory_runs_and_records_as_one_on_disk(
    write_config: ConfigWriter, project: Path
) -> None:
    search = load_search(util=30, memory=900, trials=10, seconds=8)
    search["study"]["name"] = "on-disk"
    on_disk = hpsearch.run(write_config(search, "disk.yaml"), runner=SimulatedRunner())
    search["study"].update(name="in-memory", storage="memory")
    tracker = MemoryTracker()
    in_memory = hpsearch.run(
        write_config(search, "memory.yaml"), runner=SimulatedRunner(), tracker=tracker
    )

    # The same search, decided the same way, on the same virtual clock.
    disk_trials, memory_trials = on_disk.results.study.trials, in_memory.results.study.trials
    assert [t.params for t in memory_trials] == [t.params for t in disk_trials]
    assert [t.values for t in memory_trials] == [t.values for t in disk_trials]
    assert in_memory.elapsed_s == on_disk.elapsed_s
    # Recorded as MLflow records it: a parent, a child per trial, the same last metrics.
    client = mlflow_client(project)
    parent = tracker.runs[str(in_memory.mlflow_parent_run_id)]
    assert parent.status == "FINISHED"
    for disk, memory in zip(disk_trials, memory_trials, strict=True):
        mlflow_run = client.get_run(disk.user_attrs[attrs.MLFLOW_RUN])
        run = tracker.runs[memory.user_attrs[attrs.MLFLOW_RUN]]
        assert run.tags[PARENT_TAG] == in_memory.mlflow_parent_run_id
        assert run.status == mlflow_run.info.status == "FINISHED"
        assert _last_values(run.metrics) == pytest.approx(mlflow_run.data.metrics)
        assert run.params == mlflow_run.data.params
    decisions = client.download_artifacts(
        str(on_disk.mlflow_parent_run_id), "packing_decisions.json", str(project)
    )
    on_disk_decisions = _untimed(Path(decisions).read_text())
    assert _untimed(parent.artifacts["packing_decisions.json"]) == on_disk_decisions
    assert any(d["limit"] > 1 for d in on_disk_decisions)  # the packing policy decided
    # Nothing of it was written: the disk study's database holds only its own study.
    assert optuna.get_all_study_names(DEFAULT_STUDY_STORAGE) == ["on-disk"]


def test_a_study_kept_in_memory_cannot_be_read_afterwards(write_config: ConfigWriter) -> None:
    search = load_search(util=30, memory=900, trials=2, seconds=2)
    search["study"]["storage"] = "memory"
    path = write_config(search)
    hpsearch.run(path, runner=SimulatedRunner(), tracker=MemoryTracker())

    result = CliRunner().invoke(cli_main, ["best", str(path)])

    assert result.exit_code == 2
    error = result.stderr.strip()
    assert "study.storage is 'memory'" in error
    assert "set study.storage to a database" in error
