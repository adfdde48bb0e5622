"""A lock beside a SQLite store, for several drivers working on one config at once.

MLflow migrates a new SQLite store's tables and Optuna creates a new study
storage's tables on first use; two drivers doing so at the same moment collide
(``duplicate column name``) and one of them dies. Two drivers that count the
study's trials at the same moment both see room for the last one, and run one
too many. An exclusive ``flock`` on a file beside the database serialises both
on one machine (SQLite is one machine's store anyway); other URLs get no lock
here.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_SQLITE = "sqlite:///"


@contextmanager
def sqlite_lock(url: str) -> Iterator[None]:
    """Hold an exclusive lock on ``<database>.lock`` (a SQLite store's) for the block.

    Not re-entrant: a block must not take the same store's lock again.
    """
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
