"""The stores' SQLite files, watched while a search runs: gone or replaced is one line."""

from __future__ import annotations

from pathlib import Path

from hpsearch.lifecycle import StoreWatch
from hpsearch.storage_faults import Stores


def _stores(tmp_path: Path) -> Stores:
    for name in ("optuna.db", "mlflow.db"):
        (tmp_path / name).write_bytes(b"SQLite format 3\x00")
    return Stores(
        "search.yaml", f"sqlite:///{tmp_path / 'optuna.db'}", f"sqlite:///{tmp_path / 'mlflow.db'}"
    )


def test_a_deleted_study_file_is_the_line_that_names_it_and_the_fix(tmp_path: Path) -> None:
    stopped: list[str] = []
    watch = StoreWatch(_stores(tmp_path), stop=stopped.append)
    with watch:
        assert watch.check() is None
        (tmp_path / "optuna.db").unlink()
        assert watch.check() == (
            f"search.yaml: study.storage (sqlite:///{tmp_path / 'optuna.db'}): its file was "
            "deleted (or replaced) while the search ran; restore it from a backup and run "
            "again, or point the key at a new file (and, for study.storage, run with "
            "--new-study)"
        )


def test_a_file_replaced_under_the_same_name_is_noticed_too(tmp_path: Path) -> None:
    watch = StoreWatch(_stores(tmp_path), stop=lambda line: None)
    with watch:
        replacement = tmp_path / "new.db"
        replacement.write_bytes(b"SQLite format 3\x00")
        replacement.replace(tmp_path / "mlflow.db")  # another file, the same name
        line = watch.check()
    assert line is not None
    assert line.startswith(f"search.yaml: tracking.uri (sqlite:///{tmp_path / 'mlflow.db'})")


def test_stores_that_are_no_files_are_not_watched(tmp_path: Path) -> None:
    stores = Stores("search.yaml", "postgresql://db/optuna", "http://127.0.0.1:5000")
    with StoreWatch(stores, stop=lambda line: None) as watch:
        assert watch.check() is None
