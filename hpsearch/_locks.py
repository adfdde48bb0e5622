"""A lock on a shared store, for several drivers working on one config at once.

MLflow migrates a new store's tables and Optuna creates a new study storage's
tables on first use; two drivers doing so at the same moment collide
(``duplicate column name``) and one of them dies. Two drivers that count the
study's trials at the same moment both see room for the last one, and run one
too many. The lock serialises both:

- a SQLite store: an exclusive ``flock`` on a file beside the database (SQLite is
  one machine's store anyway);
- a PostgreSQL store: a session-level advisory lock (``pg_advisory_lock``), which
  drivers on any machine share, and which the server releases when a killed
  driver's connection drops;
- other URLs (an MLflow tracking server, which serialises its own writes): none.
"""

from __future__ import annotations

import fcntl
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy
from sqlalchemy.pool import NullPool

_SQLITE = "sqlite:///"
_POSTGRESQL = ("postgresql:", "postgresql+", "postgres:")
# One key for every hpsearch driver on a database; other programs' advisory locks
# use their own keys.
_ADVISORY_KEY = zlib.crc32(b"hpsearch store lock")


@contextmanager
def store_lock(url: str, engine: sqlalchemy.Engine | None = None) -> Iterator[None]:
    """Hold the store's exclusive lock for the block (see the module docstring).

    Not re-entrant: a block must not take the same store's lock again.

    Args:
        url: the store's URL (Optuna storage or MLflow tracking URI).
        engine: an open engine on ``url`` to take a PostgreSQL lock through; without
            one, a connection of its own is opened and closed.
    """
    if url.startswith(_POSTGRESQL):
        with _advisory_lock(engine or sqlalchemy.create_engine(url, poolclass=NullPool)):
            yield
        return
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


@contextmanager
def _advisory_lock(engine: sqlalchemy.Engine) -> Iterator[None]:
    # A session-level lock needs no transaction: in autocommit, taking and releasing
    # it are one statement each, without a BEGIN and a COMMIT around each (psycopg
    # sends those as commands of their own: four round trips fewer per lock).
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": _ADVISORY_KEY})
        try:
            yield
        finally:
            connection.execute(
                sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": _ADVISORY_KEY}
            )
