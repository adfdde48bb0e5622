"""A new MLflow SQLite store, copied from a migrated empty one rather than migrated afresh.

MLflow creates a new SQL store by running every one of its migrations, about a
second of a 2-core machine's CPU at every new project (and in every test that
starts from an empty folder). The tables it ends with depend only on the MLflow
installed, so they are made once per MLflow version, in the user's cache folder
(``$XDG_CACHE_HOME/hpsearch``, else ``~/.cache/hpsearch``), and a new store is a
copy of them: MLflow then finds its tables at its head revision and creates the
store's default experiment itself, with the store's own artifact root. Anything
that goes wrong here leaves MLflow to create the store as it always did.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

from hpsearch._compat import create_mlflow_tables
from hpsearch._sqlite import sqlite_file

logger = logging.getLogger(__name__)


def cache_folder() -> Path:
    """Where hpsearch keeps what it can rebuild: ``$XDG_CACHE_HOME/hpsearch`` or
    ``~/.cache/hpsearch``."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "hpsearch"


def seed_new_store(uri: str) -> bool:
    """Copy the migrated empty store to ``uri``'s SQLite file where none exists yet.

    Returns whether it did (``False``: not a SQLite file, one is there already, or the
    copy failed and MLflow creates the store itself). Call under the store's lock:
    the copy never replaces a file another process made meanwhile.
    """
    file = sqlite_file(uri)
    if file is None or os.path.exists(file):
        return False
    path = Path(file)
    try:
        template = _template()
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=".mlflow-seed-") as folder:
            copy = Path(folder) / path.name
            shutil.copyfile(template, copy)
            os.link(copy, path)  # fails where a file appeared: never replaces one
    except Exception as exc:  # any failure: MLflow creates the store as it always did
        logger.debug("MLflow store %s not copied from a template: %s", path, exc)
        return False
    return True


def _template() -> Path:
    """The migrated empty store of the installed MLflow, made here the first time."""
    import mlflow

    folder = cache_folder()
    template = folder / f"mlflow-{mlflow.__version__}-empty.db"
    if template.exists():
        return template
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".mlflow-") as making:
        fresh = Path(making) / template.name
        create_mlflow_tables(f"sqlite:///{fresh}")
        os.replace(fresh, template)  # whole or not at all, whoever else makes it
    return template
