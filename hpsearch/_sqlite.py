"""SQLite stores kept by hpsearch: written ahead (WAL), synced at checkpoints, not at each commit.

A search commits a few dozen times a trial to its Optuna study and its MLflow
store; in SQLite's default journal each commit waits for the disk twice, and
at ten trials a second that is most of what the driver does. In WAL mode with
``synchronous=NORMAL`` a commit appends to the write-ahead log and returns: a
killed process loses nothing committed (the log is replayed on the next open),
only a power cut may lose the last commits. Readers (``hpsearch best`` during a
search) read beside the writer instead of waiting for it.

Only the stores hpsearch opens are set so (:func:`write_ahead`), not every
SQLite database of the process: a search run from a user's program leaves the
user's databases as they are. WAL needs a local disk: a study shared over a
network file system belongs in PostgreSQL, as the clusters guide says.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any

import sqlalchemy
from sqlalchemy import event

CHECKPOINT_PAGES = 250
"""Pages (1 MB) the write-ahead log grows to before it is folded back (SQLite's own: 1000)."""

_lock = threading.Lock()
_paths: set[str] = set()
_listening = False


def write_ahead(url: str) -> None:
    """Set every connection hpsearch's process opens to the SQLite file of ``url`` to WAL.

    Call before the store's engine is first used; a URL that is not a SQLite file
    (a server, or ``:memory:``) is left alone.
    """
    path = sqlite_file(url)
    if path is None:
        return
    global _listening  # noqa: PLW0603 - one listener for the process
    with _lock:
        _paths.add(path)
        if not _listening:
            event.listen(sqlalchemy.engine.Engine, "connect", _on_connect)
            _listening = True


def sqlite_file(url: str) -> str | None:
    """The real path of the SQLite file ``url`` names (``None``: a server, or in memory)."""
    if not url.startswith("sqlite:///"):
        return None
    path = url.removeprefix("sqlite:///").split("?", 1)[0]
    if path in ("", ":memory:"):
        return None
    return os.path.realpath(path)


def _on_connect(connection: Any, _record: Any) -> None:
    if not isinstance(connection, sqlite3.Connection):
        return
    cursor = connection.cursor()
    try:
        listed = cursor.execute("PRAGMA database_list").fetchall()
        files = {os.path.realpath(row[2]) for row in listed if row[2]}
        with _lock:
            ours = bool(files & _paths)
        if ours:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            # A short log, folded back often and kept short: every page is written
            # twice (log, then file), and a small disk should fill with records,
            # not with a log of what is already in the file.
            cursor.execute(f"PRAGMA wal_autocheckpoint={CHECKPOINT_PAGES}")
            cursor.execute(f"PRAGMA journal_size_limit={CHECKPOINT_PAGES * 4096}")
    finally:
        cursor.close()


def settle(url: str) -> None:
    """Fold the write-ahead log of ``url``'s SQLite file back into it (the search is over).

    The store is then one file again, as a user copies, backs up or moves it; its
    log stays empty while this process keeps the store open. Best effort: a store
    another process is writing to is folded by whoever closes it last.
    """
    path = sqlite_file(url)
    with _lock:
        ours = path in _paths
    if path is None or not ours or not os.path.exists(path):
        return
    try:
        connection = sqlite3.connect(path, timeout=1.0)
    except sqlite3.Error:
        return
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error:
        pass  # busy with another writer, read-only, gone: nothing to fold here
    finally:
        connection.close()
