"""A tracking URI as every process of a search names it: a SQLite file's path made absolute.

Light (no MLflow): the driver builds its workers' settings from it before MLflow loads.
"""

from __future__ import annotations

from pathlib import Path


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
