"""Faults of the disk or of a database file under a search, as one line a user can act on.

A full disk, a read-only ``mlruns/``, a corrupt or deleted ``optuna.db`` surfaces deep in
SQLAlchemy, Optuna or MLflow as a long traceback ending in a message about
something else. :func:`storage_fault` recognises them from the exception chain
and names the store (``study.storage`` or ``tracking.uri``, told apart by which
library raised) and the fix.
"""

from __future__ import annotations

import errno
import re
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Stores:
    """Where a config keeps its records, to name them in a message."""

    source: str
    study_storage: str
    tracking_uri: str


_FULL = "the disk is full"
_READ_ONLY = "the store is read-only"
_CORRUPT = "the file is not a SQLite database (corrupt, or not written by hpsearch)"
_CANNOT_OPEN = "the database file cannot be opened"
_DELETED = "its file was deleted (or replaced) while the search ran"
_LOCKED = "another program kept it locked for longer than hpsearch waits for a lock"

_FIXES = {
    _FULL: "free some space and run again (what was recorded so far is kept)",
    _READ_ONLY: "make it writable, or point the key at a writable place",
    _CORRUPT: "restore it from a backup, or point the key at a new file",
    _CANNOT_OPEN: "check that its folder exists and is writable",
    _DELETED: (
        "restore it from a backup and run again, or point the key at a new file "
        "(and, for study.storage, run with --new-study)"
    ),
    _LOCKED: (
        "end that program's open transaction (a database browser's unsaved change, a "
        "script stopped inside one) and run again (what was recorded so far is kept)"
    ),
}


def storage_fault(exc: BaseException, stores: Stores | None = None) -> str | None:
    """One line for ``exc`` when it is a storage fault; ``None`` for anything else."""
    problem, said = None, ""
    for link in exception_chain(exc):
        problem = _problem(link)
        if problem is not None:
            said = str(link).lower()
            break
    if problem is None:
        return None
    if stores is None:
        return f"{problem}; {_FIXES[problem]}"
    if problem == _FULL:
        return f"{stores.source}: {problem} under the search's stores; {_FIXES[problem]}"
    key, url = _which_store(exc, stores)
    if _SQLITE_READ_ONLY in said and _deleted(url):
        # SQLite answers writes to an unlinked file with "readonly database" (a
        # read-only file system or permissions answer with their own errno).
        problem = _DELETED
    return f"{stores.source}: {key} ({url}): {problem}; {_FIXES[problem]}"


CREATE_TRIES = 3
"""Tries to open a storage whose tables another program was creating at the same time."""


def creation_race(exc: BaseException) -> bool:
    """Whether opening a study storage failed because another program created Optuna's
    tables (or a PostgreSQL type of theirs) at the same moment: hpsearch's drivers take
    the store's lock for that, but an Optuna script, a dashboard or a reader of the
    results opening the same new database does not, and its CREATE collides with ours.
    Opening again then finds the tables."""
    text = str(exc).lower()  # SQLAlchemy's text holds the database's own message
    return "already exists" in text or "duplicate key" in text


def cannot_open_line(exc: BaseException, storage: str, stores: Stores | None) -> str:
    """The one line for a study storage that cannot be opened: a storage fault's own
    line, or the error's first line and what to check (``stores``: the config's, to
    name its file and key)."""
    fault = storage_fault(exc, stores)
    if fault is not None:
        return fault if stores else f"{storage}: {fault}"
    where = f"{stores.source}: study.storage: " if stores else ""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return (
        f"{where}cannot open '{storage}' ({type(exc).__name__}: {first}); {_storage_fix(storage)}"
    )


_SCHEMES_OF_STORES = frozenset(
    {"http", "https", "file", "sqlite", "postgresql", "postgres", "mysql", "mssql", "oracle"}
)
"""The schemes a store's URL starts with (a database's, with its ``+driver`` or not)."""


def scheme_without_colon(uri: str) -> str | None:
    """``uri`` as meant where its scheme's colon was left out (``http//host:5000``, which
    reads as a path); ``None``: it has one, or starts with no store's scheme (``runs//x``
    is a folder)."""
    match = re.match(r"([A-Za-z][\w+.-]*)//(.+)", uri)
    if match is None or match[1].split("+")[0].lower() not in _SCHEMES_OF_STORES:
        return None
    return f"{match[1]}://{match[2]}"


def malformed_storage(storage: str) -> str | None:
    """What to write instead of a ``study.storage`` that is no database URL by its form
    alone (a file's path, SQLite's two slashes), as opening it would say; ``None``:
    its form is a URL's (``memory`` too). Nothing is opened or reached."""
    if storage == "memory":
        return None
    colon = scheme_without_colon(storage)
    if colon is not None:
        return f"its scheme has no ':' after it: write {colon}"
    scheme, sep, rest = storage.partition("://")
    if not sep:  # a file's path, as Optuna's JournalStorage or a SQLite file is named
        return (
            "give a database URL, e.g. sqlite:///optuna.db for a SQLite file here (a path "
            "alone, as Optuna's JournalStorage takes one, is no storage URL)"
        )
    if scheme == "sqlite" and not rest.startswith("/"):
        return f"a SQLite file's URL has three slashes: sqlite:///{rest}"
    return None


_DRIVER_PACKAGES = {
    "MySQLdb": "mysqlclient",
    "pymysql": "PyMySQL",
    "mysql": "mysql-connector-python",
    "psycopg2": "psycopg2-binary",
    "psycopg": "psycopg[binary]",
    "pg8000": "pg8000",
    "asyncpg": "asyncpg",
    "pyodbc": "pyodbc",
    "oracledb": "oracledb",
}
"""The package that installs a database driver SQLAlchemy imports, where its name differs."""
_SCHEMES = "sqlite:///FILE.db, postgresql://USER@HOST/DB or mysql://USER@HOST/DB"


def missing_driver(url: str) -> tuple[str, str] | None:
    """What stops SQLAlchemy from opening the database URL ``url`` before it reaches the
    database, and the fix: a database SQLAlchemy has no dialect for (``postgres://``), or
    a driver this Python lacks (``mysql://`` without ``mysqlclient``); ``None``: neither,
    or no URL at all (``memory``, a path). Nothing is reached. SQLite's driver comes with
    Python. A tracking server's ``https://`` is no database: its caller asks only of those.
    """
    scheme, sep, _ = url.partition("://")
    if not sep or scheme.split("+")[0] == "sqlite":
        return None
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
        dialect = parsed.get_dialect()
    except NoSuchModuleError:
        backend = scheme.split("+")[0]
        fix = f"write {_SCHEMES}"
        if backend == "postgres":  # Heroku's and older SQLAlchemy's spelling
            fix = f"write postgresql://{url.partition('://')[2]}"
        return f"SQLAlchemy knows no database '{scheme}'", fix
    except ArgumentError:
        return None
    # SQLAlchemy 2 imports a driver with import_dbapi(), 1.4 (which Optuna allows) dbapi().
    loaded: Any = dialect
    importer: Callable[[], object] = getattr(loaded, "import_dbapi", None) or loaded.dbapi
    try:
        importer()
    except ImportError as exc:
        instead = f"name an installed one in the URL ({parsed.get_backend_name()}+DRIVER://...)"
        if not isinstance(exc, ModuleNotFoundError):  # there, but a library of its is not
            return f"its database driver, {dialect.driver}, does not import here ({exc})", (
                f"install what it needs, or {instead}"
            )
        module = exc.name or dialect.driver
        package = _DRIVER_PACKAGES.get(module.split(".")[0], module)
        return (
            f"its database driver, {module}, is not installed here",
            f"pip install {package}, or {instead}",
        )
    return None


def _storage_fix(storage: str) -> str:
    """What to check for a study storage that cannot be opened: its form, where it is not
    a database URL, its driver, where this Python lacks it, else whether it is reachable."""
    missing = missing_driver(storage)
    if missing is not None:
        return f"{missing[0]}: {missing[1]}"
    return malformed_storage(storage) or "check the URL and that the database is reachable"


def deleted_line(stores: Stores, key: str, url: str) -> str:
    """The error line of a search whose store ``key`` (``url``) lost its file as it ran."""
    return f"{stores.source}: {key} ({url}): {_DELETED}; {_FIXES[_DELETED]}"


def _deleted(url: str) -> bool:
    """Whether ``url`` is a SQLite file that is no longer there."""
    return url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists()


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from or during, each once (SQLAlchemy's wrapped
    driver error included)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        link = todo.pop()
        if link is None or id(link) in seen:
            continue
        seen.add(id(link))
        yield link
        todo += [link.__cause__, link.__context__]
        orig = getattr(link, "orig", None)  # SQLAlchemy wraps the driver's error
        if isinstance(orig, BaseException):
            todo.append(orig)


_SQLITE_READ_ONLY = "readonly database"
_BY_ERRNO = {errno.ENOSPC: _FULL, errno.EROFS: _READ_ONLY, errno.EACCES: _READ_ONLY}
_BY_TEXT = (
    ("database or disk is full", _FULL),
    ("no space left on device", _FULL),
    (_SQLITE_READ_ONLY, _READ_ONLY),
    ("read-only file system", _READ_ONLY),
    ("file is not a database", _CORRUPT),
    ("database disk image is malformed", _CORRUPT),
    ("unable to open database file", _CANNOT_OPEN),
    # SQLite's answer once its busy wait (30 s for the study, MLflow's 20 s) ran out.
    ("database is locked", _LOCKED),
)


def _problem(exc: BaseException) -> str | None:
    if isinstance(exc, OSError) and exc.errno in _BY_ERRNO:
        return _BY_ERRNO[exc.errno]
    text = str(exc).lower()
    return next((problem for marker, problem in _BY_TEXT if marker in text), None)


def _which_store(exc: BaseException, stores: Stores) -> tuple[str, str]:
    """The store whose library raised ``exc`` (MLflow's, else the study's)."""
    for link in exception_chain(exc):
        if getattr(link, "tracking_store", False):  # raised for the tracking writer's process
            return "tracking.uri", stores.tracking_uri
        for frame in traceback.extract_tb(link.__traceback__):
            if "/mlflow/" in frame.filename:
                return "tracking.uri", stores.tracking_uri
    return "study.storage", stores.study_storage
