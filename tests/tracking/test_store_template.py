"""A new MLflow SQLite store copied from the installed MLflow's migrated empty tables."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hpsearch.tracking import MlflowTracker, RunStatus
from hpsearch.tracking._store_template import cache_folder, seed_new_store


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "hpsearch"


def test_the_first_store_makes_the_template_and_later_ones_are_copies_of_it(
    cache: Path, tmp_path: Path, project: Path
) -> None:
    assert cache_folder() == cache
    first = tmp_path / "one" / "mlflow.db"
    MlflowTracker(f"sqlite:///{first}", "exp", None)
    (template,) = cache.glob("mlflow-*-empty.db")
    with sqlite3.connect(template) as db:  # read as a file: MLflow would add its default
        assert db.execute("SELECT COUNT(*) FROM experiments").fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM alembic_version").fetchone() == (1,)

    second = tmp_path / "two" / "mlflow.db"
    assert seed_new_store(f"sqlite:///{second}")
    assert second.read_bytes() == template.read_bytes()
    tracker = MlflowTracker(f"sqlite:///{second}", "exp", None)
    run = tracker.start_run("trial-0", params={"x": 1})
    tracker.end_run(run, RunStatus.FINISHED)
    # MLflow made the default experiment on the copy: its artifacts are the store's own.
    default = tracker.client.get_experiment("0")
    assert default.artifact_location == str(project / "mlruns" / "0")
    assert tracker.client.get_run(run).data.params == {"x": "1"}
    assert not [p for p in second.parent.iterdir() if p.name.startswith(".mlflow-seed-")]


def test_a_store_already_there_or_not_a_file_is_left_to_mlflow(cache: Path, tmp_path: Path) -> None:
    there = tmp_path / "mlflow.db"
    there.write_bytes(b"")
    assert not seed_new_store(f"sqlite:///{there}")
    assert there.read_bytes() == b""
    assert not seed_new_store("sqlite:///:memory:")
    assert not seed_new_store("http://127.0.0.1:5000")
    assert not cache.exists()  # nothing made for them


def test_a_cache_that_cannot_be_written_leaves_mlflow_to_create_the_store(
    cache: Path, tmp_path: Path
) -> None:
    cache.parent.mkdir(parents=True)
    cache.write_text("a file where the folder would be")
    store = tmp_path / "mlflow.db"
    assert not seed_new_store(f"sqlite:///{store}")
    tracker = MlflowTracker(f"sqlite:///{store}", "exp", None)
    assert tracker.experiment_id == "1"
