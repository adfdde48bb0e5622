"""A tracking URI as every process of a search names it: a SQLite file's path made absolute;
and a folder, MLflow's file store, refused before anything opens it.

Light (no MLflow): the driver builds its workers' settings from it before MLflow loads.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from hpsearch.errors import ConfigError
from hpsearch.storage_faults import missing_driver, scheme_without_colon


def resolve_tracking_uri(uri: str) -> str:
    """Absolute form of a tracking URI, a SQLite file's folder made where it is missing."""
    if _relative_sqlite(uri):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return absolute_tracking_uri(uri)


def absolute_tracking_uri(uri: str) -> str:
    """Absolute form of a tracking URI; a relative SQLite path starts at the working directory."""
    if _relative_sqlite(uri):
        return f"sqlite:///{Path(uri.removeprefix('sqlite:///')).resolve()}"
    return uri


def _relative_sqlite(uri: str) -> bool:
    return uri.startswith("sqlite:///") and not uri.startswith("sqlite:////")


def file_store_folder(uri: str) -> str | None:
    """The folder ``uri`` names where it names one, MLflow's file store (``./mlruns``,
    ``file:///data/mlruns``); ``None`` for a database or a server."""
    parsed = urlparse(uri)
    if uri.startswith("databricks"):
        return None
    if parsed.scheme in {"", "file"}:
        return os.path.normpath(parsed.path or ".")
    if len(parsed.scheme) == 1:  # C:\mlruns, a Windows drive
        return "mlruns"
    return None


def file_store_fix(folder: str) -> str:
    """What to write instead of MLflow's file store at ``folder``."""
    return (
        f"name a SQLite file instead, such as sqlite:///{folder}/mlflow.db (`mlflow "
        "migrate-filestore` moves the folder's runs there), or set MLFLOW_ALLOW_FILE_STORE=true"
    )


_DATABASES = frozenset({"postgres", "postgresql", "mysql", "mssql", "sqlite"})
"""The schemes MLflow opens as a database (through SQLAlchemy), ``postgres`` as a user
may misspell it."""


def check_store_uri(uri: str, source: str | Path) -> None:
    """Refuse, before anything runs, a ``tracking.uri`` MLflow will refuse to open: a
    folder, MLflow's file store, which MLflow 3 opens only where
    ``MLFLOW_ALLOW_FILE_STORE`` is true; a database SQLAlchemy has no dialect for, or
    whose driver this Python lacks (its writer process failed on it with a traceback).

    Raises:
        ConfigError: such a folder or database, with what to write instead.
    """
    colon = scheme_without_colon(uri)
    if colon is not None:
        raise ConfigError(
            source, "tracking.uri", f"'{uri}' has no ':' after its scheme", f"write {colon}"
        )
    folder = file_store_folder(uri)
    if folder is None and urlparse(uri).scheme.split("+")[0] in _DATABASES:
        missing = missing_driver(uri)
        if missing is not None:
            raise ConfigError(source, "tracking.uri", f"'{uri}': {missing[0]}", missing[1])
    allowed = os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").strip().lower() in {"true", "1"}
    if folder is None or allowed:
        return
    raise ConfigError(
        source,
        "tracking.uri",
        f"'{uri}' is a folder, MLflow's file store, which MLflow 3 no longer opens",
        file_store_fix(folder),
    )
