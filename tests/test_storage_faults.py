"""Storage faults recognised from an exception chain, as one line naming the store and the fix."""

from __future__ import annotations

import errno
import sqlite3
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from hpsearch.storage_faults import Stores, storage_fault

STORES = Stores("c.yaml", "sqlite:///mlruns/optuna.db", "sqlite:///mlruns/mlflow.db")


def test_the_driver_error_under_sqlalchemy_and_other_wrappers_is_found() -> None:
    full = OperationalError("INSERT ...", {}, sqlite3.OperationalError("database or disk is full"))
    try:
        try:
            raise full
        except OperationalError as inner:
            raise RuntimeError("Error stopping trial") from inner
    except RuntimeError as outer:
        line = storage_fault(outer, STORES)
    assert line == (
        "c.yaml: the disk is full under the search's stores; free some space and run again "
        "(what was recorded so far is kept)"
    )


def test_each_fault_names_the_store_and_its_fix() -> None:
    read_only = storage_fault(OSError(errno.EROFS, "Read-only file system"), STORES)
    assert read_only == (
        "c.yaml: study.storage (sqlite:///mlruns/optuna.db): the store is read-only; "
        "make it writable, or point the key at a writable place"
    )
    corrupt = storage_fault(sqlite3.DatabaseError("file is not a database"))
    assert corrupt is not None
    assert corrupt.startswith("the file is not a SQLite database")
    assert storage_fault(ValueError("a bug, not a disk")) is None


def test_sqlites_read_only_answer_for_a_file_that_is_gone_is_said_as_deleted(
    tmp_path: Path,
) -> None:
    gone = Stores("c.yaml", f"sqlite:///{tmp_path}/optuna.db", "sqlite:///mlruns/mlflow.db")
    # What SQLite raises on a write to a file unlinked under its open connection.
    line = storage_fault(sqlite3.OperationalError("attempt to write a readonly database"), gone)
    assert line == (
        f"c.yaml: study.storage (sqlite:///{tmp_path}/optuna.db): its file was deleted (or "
        "replaced) while the search ran; restore it from a backup and run again, or point "
        "the key at a new file (and, for study.storage, run with --new-study)"
    )
    # A read-only file system stays read-only, there or not.
    read_only = storage_fault(OSError(errno.EROFS, "Read-only file system"), gone)
    assert read_only is not None
    assert "the store is read-only" in read_only


def test_a_study_another_program_keeps_locked_past_the_wait_is_one_line(tmp_path: Path) -> None:
    # A real lock: a database browser's open write transaction, as SQLite reports it to a
    # writer whose busy wait ran out (30 s for the study; a short one here).
    url = f"sqlite:///{tmp_path}/optuna.db"
    holder = sqlite3.connect(tmp_path / "optuna.db", isolation_level=None)
    holder.execute("CREATE TABLE trials (x)")
    holder.execute("BEGIN EXCLUSIVE")
    engine = create_engine(url, connect_args={"timeout": 0.05})
    with pytest.raises(OperationalError) as raised, engine.begin() as connection:
        connection.execute(text("INSERT INTO trials VALUES (1)"))
    holder.close()
    engine.dispose()
    line = storage_fault(raised.value, Stores("c.yaml", url, "sqlite:///mlruns/mlflow.db"))
    assert line == (
        f"c.yaml: study.storage ({url}): another program kept it locked for longer than "
        "hpsearch waits for a lock; end that program's open transaction (a database "
        "browser's unsaved change, a script stopped inside one) and run again (what was "
        "recorded so far is kept)"
    )


def test_a_storage_that_is_no_database_url_is_told_the_form_to_write() -> None:
    from hpsearch.storage_faults import cannot_open_line

    stores = Stores("c.yaml", "journal.log", "sqlite:///mlruns/mlflow.db")
    path_alone = cannot_open_line(
        ValueError("Could not parse SQLAlchemy URL"), "journal.log", stores
    )
    assert path_alone.endswith(
        "give a database URL, e.g. sqlite:///optuna.db for a SQLite file here (a path alone, "
        "as Optuna's JournalStorage takes one, is no storage URL)"
    )
    two_slashes = cannot_open_line(ValueError("Invalid SQLite URL"), "sqlite://optuna.db", stores)
    assert two_slashes.endswith("a SQLite file's URL has three slashes: sqlite:///optuna.db")
    server = cannot_open_line(ConnectionError("refused"), "postgresql://h/db", stores)
    assert server.endswith("check the URL and that the database is reachable")


def test_a_database_sqlalchemy_cannot_load_is_told_before_anything_is_reached(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from hpsearch.storage_faults import missing_driver

    monkeypatch.setitem(sys.modules, "pymysql", None)  # as where PyMySQL is not installed
    assert missing_driver("mysql+pymysql://me@h/db") == (
        "its database driver, pymysql, is not installed here",
        "pip install PyMySQL, or name an installed one in the URL (mysql+DRIVER://...)",
    )
    assert missing_driver("foo://h/db") == (
        "SQLAlchemy knows no database 'foo'",
        "write sqlite:///FILE.db, postgresql://USER@HOST/DB or mysql://USER@HOST/DB",
    )
    # A driver that is there, but a library it loads is not.
    monkeypatch.delitem(sys.modules, "pymysql")
    broken = tmp_path / "pymysql.py"
    broken.write_text("raise ImportError('libmysqlclient.so.21: cannot open shared object file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert missing_driver("mysql+pymysql://me@h/db") == (
        "its database driver, pymysql, does not import here (libmysqlclient.so.21: cannot "
        "open shared object file)",
        "install what it needs, or name an installed one in the URL (mysql+DRIVER://...)",
    )
    # Drivers that are here, SQLite's (Python's own), and what is no URL at all.
    for fine in ("postgresql://me@h/db", "sqlite:///optuna.db", "memory", "optuna.db"):
        assert missing_driver(fine) is None


def test_a_url_whose_schemes_colon_was_left_out_is_told_the_url_meant() -> None:
    from hpsearch.storage_faults import malformed_storage

    assert malformed_storage("postgresql//me@h/db") == (
        "its scheme has no ':' after it: write postgresql://me@h/db"
    )
    assert malformed_storage("sqlite:///optuna.db") is None
