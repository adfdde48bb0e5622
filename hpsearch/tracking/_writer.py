"""The tracking writer: a process of its own that writes a driver's MLflow records.

On a database server (PostgreSQL) MLflow's Python costs the driver about half of
its CPU per trial: SQLAlchemy's sessions, a round trip per statement. Here the
writes run beside the driver, on another core, while the driver runs the search
(:class:`~hpsearch.tracking.ProcessTracker` is the driver's side).

Started as ``python -m hpsearch.tracking._writer FD``: ``FD`` is its end of a
socket pair. It writes what arrives, in order, through an
:class:`~hpsearch.tracking.MlflowTracker` (a run created at once; a running trial's
params, tags and metrics together within a second, as in the driver), and
acknowledges what it has written.
When the driver goes (its end closes, even killed), the writer writes what it
received and exits: nothing the driver handed over is lost with it.
"""

from __future__ import annotations

import functools
import signal
import sys
import tempfile
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from hpsearch._quiet import quiet_libraries
from hpsearch.tracking._base import FLUSH_S, RunStatus
from hpsearch.tracking._writer_messages import (
    STAND_IN_PREFIX,
    Acked,
    Answer,
    Created,
    Failure,
    Open,
    Opened,
    Read,
    ReadKind,
    Write,
    WriteKind,
    failure_of,
)

MOST_AT_ONCE = 1000
"""The most messages the writer takes in before it writes what is due and acknowledges."""

RUN_KEY_TAG = "hpsearch.run_key"
"""On every run the writer creates: the driver's id for it, to find it again rather than
create it twice when a writer that died is replaced and its writes are sent again."""


class _Writer:
    """Writes what one driver sends, in order, through an ``MlflowTracker``."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._ids: dict[str, str] = {}
        self._unwritten: dict[str, int] = {}
        """Runs with records not yet written: the first message that gave them one."""
        self._driver_gone = False
        self._handled = 0
        """The last message handled."""
        self._acked = 0
        """The last message acknowledged."""

    def serve(self) -> None:
        """Answer the driver until its end of the connection closes."""
        from hpsearch.tracking._mlflow import MlflowTracker

        opening = self._conn.recv()
        assert isinstance(opening, Open)
        try:
            self._tracker = MlflowTracker(
                opening.uri, opening.experiment, opening.artifact_location
            )
        except Exception as exc:
            self._tell(failure_of(0, exc))
            return
        self._ids.update(opening.known)
        self._tell(Opened(self._tracker.experiment_id))
        ended = False
        while not ended:
            batch, ended = self._collect()
            for message in batch:
                self._handle(message)
                self._handled = message.seq
            # A running trial's params, tags and metrics wait up to FLUSH_S to go out in
            # one batch, as in the driver; what waits is not acknowledged yet.
            self._guarded(self._handled, functools.partial(self._flush, everything=ended))
            self._acknowledge()

    def _flush(self, *, everything: bool) -> None:
        """Write what has waited :data:`~hpsearch.tracking.FLUSH_S` (``everything``: all)."""
        self._tracker.flush(0.0 if everything else FLUSH_S)
        pending = self._tracker.pending_runs()
        self._unwritten = {run: seq for run, seq in self._unwritten.items() if run in pending}

    def _acknowledge(self) -> None:
        """Tell the driver how far everything it sent is written (what waits in a batch
        holds that back)."""
        unwritten = self._unwritten.values()
        upto = min(unwritten) - 1 if unwritten else self._handled
        if upto > self._acked:
            self._tell(Acked(upto))
            self._acked = upto

    def _collect(self) -> tuple[list[Write | Read], bool]:
        """What the driver sent: the first message (waited for, up to
        :data:`~hpsearch.tracking.FLUSH_S` while records wait to be written), then what
        else has arrived, up to a read (answered at once); whether the driver's end closed."""
        batch: list[Write | Read] = []
        try:
            if self._unwritten and not self._conn.poll(FLUSH_S):
                return batch, False
            while len(batch) < MOST_AT_ONCE:
                message = self._conn.recv()
                batch.append(message)
                if isinstance(message, Read) or not self._conn.poll(0):
                    break
        except (EOFError, OSError):
            return batch, True
        return batch, False

    def _handle(self, message: Write | Read) -> None:
        if isinstance(message, Read):
            # The writes before it first, acknowledged before the answer: a driver whose
            # flush() returned holds nothing it would send again.
            self._guarded(message.seq, functools.partial(self._flush, everything=True))
            self._handled = message.seq - 1
            self._acknowledge()
            self._guarded(message.seq, lambda: self._answer(message))
            return
        run_id = self._ids.get(message.run_id, message.run_id)
        if message.kind is WriteKind.START_RUN:
            self._guarded(message.seq, lambda: self._start(message))
        elif message.run_id in self._ids or not message.run_id.startswith(STAND_IN_PREFIX):
            method: Callable[..., Any] = getattr(self._tracker, message.kind.value)
            if message.kind is WriteKind.LOG_FILE:
                method = self._log_file
            self._guarded(message.seq, lambda: method(run_id, *message.args))
            if message.kind in _BATCHED:
                self._unwritten.setdefault(run_id, message.seq)
        # else: the run's creation failed, and was said: there is no run to write to.

    def _log_file(self, run_id: str, name: str, content: bytes, folder: str | None) -> None:
        """A file the driver sent as its name and content, stored as an artifact."""
        with tempfile.TemporaryDirectory(prefix="hpsearch-writer-") as where:
            path = Path(where) / name
            path.write_bytes(content)
            self._tracker.log_file(run_id, path, folder)

    def _start(self, message: Write) -> None:
        name, params, tags, parent = message.args
        parent = self._ids.get(parent, parent) if parent else None
        found = (
            self._tracker.client.search_runs(
                [self._tracker.experiment_id],
                f"tags.`{RUN_KEY_TAG}` = '{message.run_id}'",
                max_results=1,
            )
            if message.again
            else []
        )
        if found:
            run_id = found[0].info.run_id
        else:
            tags = {**(tags or {}), RUN_KEY_TAG: message.run_id}
            run_id = self._tracker.start_run(name, params, tags, parent)
            if params:  # they go out with the run's first batch
                self._unwritten.setdefault(run_id, message.seq)
        self._ids[message.run_id] = run_id
        self._tell(Created(message.run_id, run_id))

    def _answer(self, message: Read) -> None:
        tracker, args = self._tracker, message.args
        value: Any = None
        if message.kind is ReadKind.RUNNING_RUN_IDS:
            value = tracker.running_run_ids()
        elif message.kind is ReadKind.RUNS_OF_TRIAL:
            value = tracker.runs_of_trial(*args)
        elif message.kind is ReadKind.END_RUNNING_CHILDREN:
            tracker.end_running_children(self._ids.get(args[0], args[0]), RunStatus(args[1]))
        elif message.kind is ReadKind.END_IF_RUNNING:
            value = tracker.end_if_running(self._ids.get(args[0], args[0]), RunStatus(args[1]))
        self._tell(Answer(message.seq, value))

    def _tell(self, message: Opened | Created | Acked | Answer | Failure) -> None:
        """Tell the driver ``message``; a driver gone (killed) is told nothing more, and what
        it handed over is written all the same."""
        if self._driver_gone:
            return
        try:
            self._conn.send(message)
        except OSError:
            self._driver_gone = True

    def _guarded(self, seq: int, call: Callable[[], Any]) -> None:
        """``call``; what it raises goes to the driver, which raises it there."""
        try:
            call()
        except Exception as exc:
            self._tell(failure_of(seq, exc))


_BATCHED = (WriteKind.LOG_PARAMS, WriteKind.LOG_METRICS, WriteKind.SET_TAGS)
"""The writes an ``MlflowTracker`` keeps to send with the run's next batch."""


def main(argv: list[str]) -> None:
    """Serve the driver on file descriptor ``argv[1]``."""
    # Ctrl-C, a terminal closing or a SIGTERM sent to the driver's whole group reach
    # the driver, which stops its search and then closes this writer; this writer
    # goes on until then (or until the driver's end closes), so that the search's
    # last records (its runs ended KILLED) are written.
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    # MLflow's chatter kept from the user's console, as in the driver.
    with Connection(int(argv[1])) as conn, quiet_libraries():
        _Writer(conn).serve()


if __name__ == "__main__":
    main(sys.argv)
