"""A lock around creating a SQLite store, for several drivers starting on one config at once.

MLflow migrates a new SQLite store's tables and Optuna creates a new study
storage's tables on first use; two drivers doing so at the same moment collide
(``duplicate column name``) and one of them dies. An exclusive ``flock`` on a
file beside the database serialises the creation on one machine (SQLite is
one machine's store anyway); other URLs need no lock here.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_SQLITE = "sqlite:///"


@contextmanager
def sqlite_creation_lock(url: str) -> Iterator[None]:
    """Hold an exclusive lock on ``<database>.lock`` while a SQLite store is opened."""
    if not url.startswith(_SQLITE) or url.removeprefix(_SQLITE) in ("", ":memory:"):
        yield
        return
    database = Path(url.removeprefix(_SQLITE))
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(database.with_name(database.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
