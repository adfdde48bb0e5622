"""A :class:`~hpsearch.tracking.Tracker` whose writes a process of its own makes.

The driver hands each write to its tracking writer (:mod:`hpsearch.tracking._writer`)
and goes on: a run opened gets an id of the driver's at once (``writing-...``),
and the store's id reaches who waits for it (:meth:`ProcessTracker.when_created`)
once the writer created the run. What the writer has not acknowledged stays in the
driver; a writer that dies is started again and sent it again (a run it had
created is found by its key, not created twice). Reads, and :meth:`flush`, wait
for the writes before them.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from hpsearch.tracking._base import MetricRow, RunStatus
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
    SeriesRow,
    TrackingWriteError,
    Write,
    WriteKind,
    raised,
)

_Waits = tuple[Callable[[str], None], Callable[[], None] | None]
"""Who waits for a run's store id: told it (``then``), or told it never came (``otherwise``)."""

OPEN_TIMEOUT_S = 300.0
"""How long a new writer may take to open the store (MLflow's import and, for a new
store, its schema's migrations, on a busy machine)."""

RESTARTS = 3
"""Writers started again for one call before the call fails (a writer that keeps dying)."""


@dataclass
class _Link:
    """One writer process and what it said, read by a thread of its own."""

    process: subprocess.Popen[bytes]
    sock: socket.socket
    conn: Connection
    opened: Opened | None = None
    failure: Failure | None = None
    alive: bool = True
    answers: dict[int, Answer | Failure] = field(default_factory=dict)


class _Calls:
    """The tracker's methods, each a numbered write or a read sent to the writer:
    :class:`ProcessTracker`'s plumbing."""

    def _write(self, kind: WriteKind, run_id: str, args: tuple[Any, ...]) -> None:
        raise NotImplementedError

    def _read(self, kind: ReadKind, args: tuple[Any, ...]) -> Any:
        raise NotImplementedError

    # Writes ------------------------------------------------------------------

    def start_run(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
        parent_run_id: str | None = None,
    ) -> str:
        """Open a run: the driver's id for it now, the run in the store soon after."""
        run_id = f"{STAND_IN_PREFIX}{uuid.uuid4().hex}"
        self._write(
            WriteKind.START_RUN, run_id, (name, dict(params or {}), dict(tags or {}), parent_run_id)
        )
        return run_id

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        """Log params the run did not start with."""
        if params:
            self._write(WriteKind.LOG_PARAMS, run_id, (dict(params),))

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int) -> None:
        """Log metrics for one step."""
        if metrics:
            # Timed here: sent again to a new writer, it is the same measurement.
            at_ms = int(time.time() * 1000)
            self._write(WriteKind.LOG_METRICS, run_id, (dict(metrics), step, at_ms))

    def log_series(self, run_id: str, rows: Sequence[MetricRow]) -> None:
        """Log timestamped rows, each at its own step and time."""
        if rows:
            self._write(WriteKind.LOG_SERIES, run_id, (list(map(SeriesRow.of, rows)),))

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        """Set tags (values are turned into strings)."""
        if tags:
            self._write(WriteKind.SET_TAGS, run_id, ({k: str(v) for k, v in tags.items()},))

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """Store ``text`` as an artifact file of the run."""
        self._write(WriteKind.LOG_TEXT, run_id, (text, artifact_file))

    def log_figure(self, run_id: str, figure: Any, artifact_file: str) -> None:
        """Store a matplotlib or plotly figure as an artifact."""
        self._write(WriteKind.LOG_FIGURE, run_id, (figure, artifact_file))

    def log_file(
        self, run_id: str, path: str | os.PathLike[str], folder: str | None = None
    ) -> None:
        """Store a local file as an artifact of the run (under ``folder``): its content is
        sent, since the file may be gone (a temporary one) by the time it is written."""
        file = Path(path)
        self._write(WriteKind.LOG_FILE, run_id, (file.name, file.read_bytes(), folder))

    def end_run(self, run_id: str, status: RunStatus) -> None:
        """End a run with ``status``."""
        self._write(WriteKind.END_RUN, run_id, (status,))

    # Reads: the writes before them written first -----------------------------------

    def running_run_ids(self) -> set[str]:
        """The experiment's runs still RUNNING (a live driver's, or a dead one's)."""
        return set(self._read(ReadKind.RUNNING_RUN_IDS, ()))

    def runs_of_trial(self, study: str, number: int) -> dict[str, str]:
        """The experiment's runs of ``study``'s trial ``number``: their status."""
        return dict(self._read(ReadKind.RUNS_OF_TRIAL, (study, number)))

    def end_running_children(self, parent_run_id: str, status: RunStatus) -> None:
        """End every child run of ``parent_run_id`` still RUNNING."""
        self._read(ReadKind.END_RUNNING_CHILDREN, (parent_run_id, status.value))

    def end_if_running(self, run_id: str, status: RunStatus) -> str | None:
        """End a run left RUNNING by a driver that stopped; its parent run id, if any."""
        parent = self._read(ReadKind.END_IF_RUNNING, (run_id, status.value))
        return None if parent is None else str(parent)


class ProcessTracker(_Calls):
    """Writes one MLflow experiment's runs through a writer process.

    Args:
        uri: tracking URI (a database; not a tracking server, whose outages the
            driver's :class:`~hpsearch.tracking.OutageTracker` rides out).
        experiment: experiment name, created if missing (restored if deleted).
        artifact_location: where a new experiment keeps artifacts.
    """

    def __init__(self, uri: str, experiment: str, artifact_location: str | None) -> None:
        self.uri = uri
        self.experiment_name = experiment
        self._artifact_location = artifact_location
        self._lock = threading.Lock()
        """Guards what the listening thread changes (held briefly, never while sending)."""
        self._changed = threading.Condition(self._lock)
        self._sending = threading.RLock()
        """Held while a message is numbered and sent, so that they go out in order."""
        self._seq = 0
        self._unacked: deque[Write] = deque()
        self._failures: deque[Failure] = deque()
        self._created: dict[str, str] = {}
        self._waiting: dict[str, list[_Waits]] = {}
        self._due: deque[Callable[[], None]] = deque()
        self._closed = False
        self._link = self._start()
        assert self._link.opened is not None
        self.experiment_id = self._link.opened.experiment_id
        _OPEN.add(self)

    @property
    def writer_pid(self) -> int:
        """The writer process's id (``ps`` shows it as ``hpsearch.tracking._writer``)."""
        return self._link.process.pid

    def when_created(
        self,
        run_id: str,
        then: Callable[[str], None],
        otherwise: Callable[[], None] | None = None,
    ) -> None:
        """Call ``then`` with the store's id of ``run_id`` once the writer created it (on the
        thread of a later call of this tracker); ``otherwise`` if it never is."""
        with self._lock:
            real = self._created.get(run_id)
            if real is None and run_id.startswith(STAND_IN_PREFIX):
                self._waiting.setdefault(run_id, []).append((then, otherwise))
                return
        then(real or run_id)

    def flush(self, older_than_s: float = 0.0) -> None:
        """With ``older_than_s`` 0: wait until every write so far is written. Otherwise
        (the search's ticks) what the writer said is taken up: runs created, failures."""
        if older_than_s <= 0.0:
            self._read(ReadKind.FLUSH, ())
        else:
            self._take_up()

    def close(self, timeout_s: float = 60.0) -> None:
        """Write everything, then stop the writer (at a search's end; again: nothing)."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            _OPEN.discard(self)
            link = self._link
            _hang_up(link)
            try:
                link.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                link.process.kill()
                link.process.wait()
            with self._lock:
                waiting, self._waiting = self._waiting, {}
            for waits in waiting.values():
                for _then, otherwise in waits:
                    if otherwise is not None:
                        self._due.append(otherwise)
            self._run_due()

    # The writer ---------------------------------------------------------------------

    def _write(self, kind: WriteKind, run_id: str, args: tuple[Any, ...]) -> None:
        self._take_up()
        with self._sending:
            with self._lock:
                self._seq += 1
                write = Write(self._seq, kind, run_id, args)
                self._unacked.append(write)
            if self._send(write):
                return
        self._restarted()

    def _read(self, kind: ReadKind, args: tuple[Any, ...]) -> Any:
        self._take_up()
        with self._sending, self._lock:
            self._seq += 1
            read = Read(self._seq, kind, args)
        answer: Answer | Failure | None = None
        for _ in range(RESTARTS + 1):
            with self._sending:
                link = self._link
                sent = self._send(read)
            if sent:
                with self._lock:
                    while link.alive and read.seq not in link.answers:
                        self._changed.wait()
                    answer = link.answers.pop(read.seq, None)
                if answer is not None:
                    break
            self._restarted()
        if answer is None:
            raise TrackingWriteError(f"tracking writer: it kept exiting ({self.uri})")
        self._take_up()
        if isinstance(answer, Failure):
            raise raised(answer)
        return answer.value

    def _send(self, message: Write | Read) -> bool:
        """Send ``message`` (holding ``_sending``, never ``_lock``: the writer may wait for
        the driver to read what it said); whether the writer took it."""
        if self._closed:
            raise TrackingWriteError(f"tracking writer: closed ({self.uri})")
        link = self._link
        try:
            link.conn.send(message)
        except (OSError, EOFError, ValueError):
            with self._lock:
                link.alive = False
            return False
        except Exception:
            # It does not pickle (a figure of an odd kind): nothing was sent, and it is
            # not kept to be sent again; the caller hears why.
            with self._lock:
                if self._unacked and self._unacked[-1] is message:
                    self._unacked.pop()
            raise
        return True

    def _restarted(self) -> None:
        """A new writer, sent what the one that died had not acknowledged."""
        with self._sending:
            for _ in range(RESTARTS):
                if self._link.alive:
                    return
                _hang_up(self._link)
                self._link.process.wait()
                self._link = self._start()
                with self._lock:
                    unacked = list(self._unacked)
                for write in unacked:
                    again = Write(write.seq, write.kind, write.run_id, write.args, again=True)
                    if not self._send(again):
                        break
            if not self._link.alive:
                raise TrackingWriteError(f"tracking writer: it kept exiting ({self.uri})")

    def _start(self) -> _Link:
        """A writer process, its store opened."""
        mine, its = socket.socketpair()
        package = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package, env.get("PYTHONPATH")]))
        with its:
            process = subprocess.Popen(
                [sys.executable, "-m", "hpsearch.tracking._writer", str(its.fileno())],
                pass_fds=(its.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        # The connection reads and writes a copy of the socket: shutting the socket
        # down ends what the writer reads even while this side's thread waits in recv.
        link = _Link(process, mine, Connection(os.dup(mine.fileno())))
        link.conn.send(
            Open(self.uri, self.experiment_name, self._artifact_location, dict(self._created))
        )
        threading.Thread(
            target=self._listen, args=(link,), name="hpsearch-tracking-writer", daemon=True
        ).start()
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        with self._changed:
            while link.alive and link.opened is None and link.failure is None:
                if not self._changed.wait(max(0.0, deadline - time.monotonic())):
                    break
        if link.opened is None:
            process.kill()
            _hang_up(link)
            if link.failure is not None:
                raise raised(link.failure)
            raise TrackingWriteError(
                f"tracking writer: it did not open {self.uri} (exit {process.poll()})"
            )
        return link

    def _listen(self, link: _Link) -> None:
        """What the writer says, until it ends (a thread per writer)."""
        while True:
            try:
                message = link.conn.recv()
            except (EOFError, OSError):
                break
            with self._changed:
                self._heard(link, message)
                self._changed.notify_all()
        with self._changed:
            link.alive = False
            self._changed.notify_all()
        link.conn.close()

    def _heard(self, link: _Link, message: Any) -> None:
        """Take in one message (under the lock)."""
        if isinstance(message, Acked):
            while self._unacked and self._unacked[0].seq <= message.seq:
                self._unacked.popleft()
        elif isinstance(message, Created):
            self._created[message.stand_in] = message.run_id
            for then, _otherwise in self._waiting.pop(message.stand_in, []):
                self._due.append(functools.partial(then, message.run_id))
        elif isinstance(message, Opened):
            link.opened = message
        elif isinstance(message, Failure) and message.seq == 0 and link.opened is None:
            link.failure = message
        elif isinstance(message, Answer | Failure) and message.seq not in link.answers:
            if isinstance(message, Failure) and not self._awaited(message.seq):
                self._failures.append(message)
            else:
                link.answers[message.seq] = message

    def _awaited(self, seq: int) -> bool:
        """Whether ``seq`` is a read (writes are in ``_unacked`` until acknowledged)."""
        return not any(write.seq == seq for write in self._unacked)

    def _take_up(self) -> None:
        """Who waited for a run created meanwhile is told; a write that failed is raised; a
        writer that died is replaced."""
        self._run_due()
        if not self._link.alive and not self._closed:
            self._restarted()
        with self._lock:
            failure = self._failures.popleft() if self._failures else None
        if failure is not None:
            raise raised(failure)

    def _run_due(self) -> None:
        while True:
            with self._lock:
                if not self._due:
                    return
                call = self._due.popleft()
            call()


def _hang_up(link: _Link) -> None:
    """Tell the writer there is no more (it writes what it has, then exits)."""
    with contextlib.suppress(OSError):  # it is gone already
        link.sock.shutdown(socket.SHUT_WR)
    link.sock.close()


_OPEN: weakref.WeakSet[ProcessTracker] = weakref.WeakSet()
"""Trackers whose writer runs: closed when the interpreter exits, their writes written."""


@atexit.register
def _close_open() -> None:
    for tracker in list(_OPEN):
        with contextlib.suppress(Exception):  # exiting: the writer still writes what it has
            tracker.close()
