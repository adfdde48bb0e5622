"""A store's SQLite file deleted or replaced under a running search: stopped, said in one line.

SQLite goes on writing to a file that was unlinked while it was open (in write-ahead
mode it never says so): a search whose ``optuna.db`` was deleted would record every
trial into a file no one can open again, and end with exit 0, its trials lost. The
watch reads each SQLite store's file identity once a second; when one is gone or
another file took its name, it stops the search as Ctrl-C does (the open trials are
interrupted, their MLflow runs ended KILLED), and the command exits 2 with the line
that names the store and the fix.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from hpsearch.interrupts import stop_for
from hpsearch.storage_faults import Stores, deleted_line

WATCH_INTERVAL_S = 1.0
"""How often the stores' files are looked at (a ``stat`` each)."""


class StoreWatch:
    """Watches the SQLite files of a search's stores while it runs (a context manager).

    Args:
        stores: the config's stores (``study.storage``, ``tracking.uri``); those not in
            SQLite files are not watched.
        stop: what stops the search with a line (default: as Ctrl-C, then exit 2).
        interval_s: seconds between looks.
    """

    def __init__(
        self,
        stores: Stores,
        stop: Callable[[str], None] = stop_for,
        interval_s: float = WATCH_INTERVAL_S,
    ) -> None:
        self._stores = stores
        self._stop = stop
        self._interval_s = interval_s
        self._files = {
            key: url
            for key, url in (
                ("study.storage", stores.study_storage),
                ("tracking.uri", stores.tracking_uri),
            )
            if url.startswith("sqlite:///")
        }
        self._identity = {key: _identity(url) for key, url in self._files.items()}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hpsearch-store-watch", daemon=True)

    def check(self) -> str | None:
        """The line of the first store whose file is gone or replaced since the watch began."""
        for key, url in self._files.items():
            before = self._identity[key]
            if before is not None and _identity(url) != before:
                return deleted_line(self._stores, key, url)
        return None

    def __enter__(self) -> StoreWatch:
        self._identity = {key: _identity(url) for key, url in self._files.items()}
        if self._files:
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while not self._done.wait(self._interval_s):
            line = self.check()
            if line is not None:
                self._stop(line)
                return


def _identity(url: str) -> tuple[int, int] | None:
    """The SQLite file's device and inode (``None``: no file there)."""
    try:
        found = os.stat(Path(url.removeprefix("sqlite:///")))
    except OSError:
        return None
    return found.st_dev, found.st_ino
