"""A tracking server that stops answering: its writes kept, retried, and landed when it is back.

MLflow retries a request for about four minutes before it raises, and the driver
writes from its search loop: a server that was down for 400 s held the search
silent for 247 s, then ended it with a traceback. :class:`OutageTracker` stands in
front of the :class:`~hpsearch.tracking.MlflowTracker` of a tracking server. While
the server answers, it writes through. The first write that finds it out of reach
(after one quick retry, ``MLFLOW_HTTP_REQUEST_MAX_RETRIES``) starts an outage:

* every later write is kept in order, in memory, and the search goes on; a run
  opened meanwhile gets a stand-in id (``pending-...``), replaced by the server's
  once it is created (:meth:`OutageTracker.when_created` tells who needs it);
* a thread of its own tries the kept writes again every :data:`RETRY_S`, the
  oldest first, so that the search loop never waits on the server;
* once the server answers the kept writes again, a new write waits its turn (at
  most :data:`CATCH_UP_WAIT_S`) until the retry has written it, as a write
  straight to the server would wait: the search cannot add to the queue faster
  than the server empties it (a search of short trials kept 250 writes in an
  11 s outage, and on a busy machine the queue had not emptied a minute later);
* one line says when the server stopped answering, and one when it is back and
  how many writes landed. :meth:`OutageTracker.down_for` lets the driver stop a
  search whose server stays away past ``tracking.outage_limit``.

Reads (the runs a killed driver left RUNNING, at a search's start) go straight
to the server: a search does not start without it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpsearch.tracking._base import MetricRow, RunStatus, Tracker

RETRY_S = 5.0
"""How often the kept writes are tried again while the server is out of reach."""

CATCH_UP_WAIT_S = 30.0
"""How long a write waits for its turn while the server answers the kept writes again
(the search goes on past it, the write kept: a server that slow is hardly back)."""

PENDING_PREFIX = "pending-"
"""The start of a stand-in run id, for a run opened while the server was out of reach."""

HTTP_SETTINGS = {
    # One quick retry, a 10 s timeout: a server out of reach is known in seconds,
    # not after MLflow's seven retries (minutes); the writes wait here instead.
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
"""MLflow's HTTP settings in a driver that writes to a server (a user's own values win)."""


def use_quick_http_settings() -> None:
    """Set :data:`HTTP_SETTINGS` where the environment does not say otherwise."""
    for name, value in HTTP_SETTINGS.items():
        os.environ.setdefault(name, value)


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the server could not be reached (not that it refused a write)."""
    import requests

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(
            seen,
            requests.exceptions.ConnectionError
            | requests.exceptions.Timeout
            | requests.exceptions.RetryError,
        ):
            return True
        text = str(seen)
        if text.startswith("API request to ") and " failed with " in text:
            return True  # MLflow's wrapping of the above (chained implicitly)
        seen = seen.__cause__ or seen.__context__
    return False


@dataclass(frozen=True)
class _Waiting:
    """Who waits for a run opened while the server was out of reach."""

    then: Callable[[str], None]
    otherwise: Callable[[], None] | None


@dataclass
class _Write:
    """A write kept while the server was out of reach.

    Attributes:
        what: what it writes, for the line that counts them.
        run_id: the run it writes to (a stand-in id until the run is created).
        write: the write itself, given the server's id of the run.
        kept_on_failure: once called, its records are held by the tracker beneath
            even if the request then fails (a batched write): not called again.
        creates: it creates the run ``run_id`` stands in for.
        left: it left the queue (written, or given up).
    """

    what: str
    run_id: str
    write: Callable[[str], Any]
    kept_on_failure: bool = False
    creates: bool = False
    left: bool = False


class _StandIns:
    """The server's ids of runs opened while it was out of reach, and who waits for them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: dict[str, str] = {}
        self._waiting: dict[str, list[_Waiting]] = {}

    def resolved(self, run_id: str) -> str:
        """The server's id of ``run_id`` (itself unless it stands in for a run created since)."""
        with self._lock:
            return self._ids.get(run_id, run_id)

    def created(self, stand_in: str, real: str) -> list[_Waiting]:
        """``stand_in``'s run exists now, as ``real``: who waited for it."""
        with self._lock:
            self._ids[stand_in] = real
            return self._waiting.pop(stand_in, [])

    def known_or_wait(self, run_id: str, wait: _Waiting) -> str | None:
        """The server's id of ``run_id``; ``None`` (and ``wait`` kept) while it is not created."""
        with self._lock:
            real = self._ids.get(run_id, None if run_id.startswith(PENDING_PREFIX) else run_id)
            if real is None:
                self._waiting.setdefault(run_id, []).append(wait)
            return real

    def abandoned(self) -> list[_Waiting]:
        """Every wait still open: its run will not be created."""
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        return [wait for each in waiting.values() for wait in each]


class _Retrier:
    """Runs ``retry`` on a thread of its own, one at a time, at most every ``every_s``."""

    def __init__(self, retry: Callable[[], None], every_s: float, clock: Callable[[], float]):
        self._retry, self._every_s, self._clock = retry, every_s, clock
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._last = 0.0

    def restart(self) -> None:
        """An outage starts now: the first retry is one interval away."""
        with self._lock:
            self._last = self._clock()

    def start_if_due(self, *, now: bool = False) -> None:
        """Start a retry if the interval has passed (or ``now``) and none is under way."""
        at = self._clock()
        with self._lock:
            busy = self._thread is not None and self._thread.is_alive()
            if busy or (not now and at - self._last < self._every_s):
                return
            self._last = at
            self._thread = threading.Thread(
                target=self._retry, name="hpsearch-tracking-retry", daemon=True
            )
            self._thread.start()

    def join(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a retry under way; whether one was."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return False
        thread.join(timeout_s)
        return True


@dataclass
class _Outage:
    """An outage under way: when it began, the server's last answer to a kept write since,
    and how many kept writes have landed."""

    since: float
    answered_at: float | None = None
    landed: int = 0
    answering: bool = False
    """Whether the server answered the retry's last kept write (new writes wait their turn)."""

    def done(self, answered_at: float | None) -> None:
        """A kept write left the queue (``answered_at``: when the server answered it)."""
        self.landed += 1
        if answered_at is not None:
            self.answered_at = answered_at
            self.answering = True

    def silent_for(self, now: float) -> float:
        """Seconds since the server last answered: from the outage's start, or from its last
        answer to a kept write (a server back but answering the kept writes more slowly
        than the search adds to them is not out of reach, though writes still wait)."""
        last = self.since if self.answered_at is None else max(self.since, self.answered_at)
        return now - last


class _Delegated:
    """The tracker's writes, each handed to ``_write`` (kept while the server is out of
    reach), and its reads, straight to the server: :class:`OutageTracker`'s plumbing."""

    inner: Tracker
    _stand_ins: _StandIns

    def _write(
        self, what: str, run_id: str, write: Callable[[str], Any], *, batched: bool = False
    ) -> None:
        raise NotImplementedError

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int) -> None:
        """Log metrics for one step."""
        self._write(
            "metrics", run_id, lambda r: self.inner.log_metrics(r, metrics, step), batched=True
        )

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        """Log params the run did not start with."""
        self._write("params", run_id, lambda r: self.inner.log_params(r, params), batched=True)

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        """Set tags."""
        self._write("tags", run_id, lambda r: self.inner.set_tags(r, tags), batched=True)

    def log_series(self, run_id: str, rows: Sequence[MetricRow]) -> None:
        """Log timestamped rows."""
        self._write("series", run_id, lambda r: self.inner.log_series(r, rows))

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """Store ``text`` as an artifact file of the run."""
        self._write(artifact_file, run_id, lambda r: self.inner.log_text(r, text, artifact_file))

    def log_figure(self, run_id: str, figure: Any, artifact_file: str) -> None:
        """Store a figure as an artifact."""
        self._write(
            artifact_file, run_id, lambda r: self.inner.log_figure(r, figure, artifact_file)
        )

    def log_file(
        self, run_id: str, path: str | os.PathLike[str], folder: str | None = None
    ) -> None:
        """Store a local file as an artifact of the run."""
        self._write(os.fspath(path), run_id, lambda r: self.inner.log_file(r, path, folder))

    def end_run(self, run_id: str, status: RunStatus) -> None:
        """End a run with ``status``."""
        self._write(f"end {status.value}", run_id, lambda r: self.inner.end_run(r, status))

    # Reads: straight to the server ---------------------------------------------

    def running_run_ids(self) -> set[str]:
        """The experiment's runs still RUNNING."""
        return self.inner.running_run_ids()

    def runs_of_trial(self, study: str, number: int) -> dict[str, str]:
        """The experiment's runs of ``study``'s trial ``number``: their status."""
        return self.inner.runs_of_trial(study, number)

    def end_running_children(self, parent_run_id: str, status: RunStatus) -> None:
        """End every child run of ``parent_run_id`` still RUNNING."""
        self.inner.end_running_children(self._stand_ins.resolved(parent_run_id), status)

    def end_if_running(self, run_id: str, status: RunStatus) -> str | None:
        """End a run left RUNNING by a driver that stopped."""
        return self.inner.end_if_running(self._stand_ins.resolved(run_id), status)


class OutageTracker(_Delegated):
    """A :class:`~hpsearch.tracking.Tracker` that keeps writing through a server's outage.

    Args:
        inner: the tracker that writes to the server.
        uri: the server's URI, for the lines.
        say: prints one line (the outage's start and end).
        clock: monotonic seconds.
        wall: Unix time, for the time of day the outage started.
        retry_s: how often kept writes are tried again.
    """

    def __init__(
        self,
        inner: Tracker,
        uri: str,
        say: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        retry_s: float = RETRY_S,
    ) -> None:
        self.inner = inner
        self.uri = uri
        self._say = say
        self._clock = clock
        self._wall = wall
        self._retry_s = retry_s
        self._lock = threading.Lock()
        self._turn = threading.Condition(self._lock)
        """Told whenever a kept write leaves the queue, or the retry stops answering."""
        self._replaying = threading.local()
        """Set on the thread that writes the kept writes (its own writes never wait)."""
        self._kept: deque[_Write] = deque()
        self._stand_ins = _StandIns()
        self._outage: _Outage | None = None
        self._retries = _Retrier(self._retry, retry_s, clock)

    @property
    def experiment_id(self) -> str:
        """The experiment's id."""
        return self.inner.experiment_id

    def down_for(self) -> float | None:
        """Seconds the server has not answered for; ``None`` while writes go straight to it."""
        with self._lock:
            return None if self._outage is None else self._outage.silent_for(self._clock())

    def kept(self) -> int:
        """How many writes wait for the server."""
        with self._lock:
            return len(self._kept)

    # Writes ----------------------------------------------------------------

    def start_run(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
        parent_run_id: str | None = None,
    ) -> str:
        """Create a run; while the server is out of reach, a stand-in id now, the run later."""
        stand_in = f"{PENDING_PREFIX}{uuid.uuid4().hex}"

        def parent() -> str | None:  # a stand-in parent may have been created since
            return self._stand_ins.resolved(parent_run_id) if parent_run_id else None

        def create(_: str) -> str:
            real = self.inner.start_run(name, params, tags, parent())
            self._created(stand_in, real)
            return real

        kept = _Write(f"run {name}", stand_in, create, creates=True)
        if self._kept_while_down(kept):
            return stand_in
        try:
            return self.inner.start_run(name, params, tags, parent())
        except Exception as exc:
            self._went_down(exc)
        self._keep(kept)
        return stand_in

    def when_created(
        self,
        run_id: str,
        then: Callable[[str], None],
        otherwise: Callable[[], None] | None = None,
    ) -> None:
        """Call ``then`` with the server's id of ``run_id``: now, or once it is created;
        ``otherwise`` if :meth:`give_up` finds it never was."""
        real = self._stand_ins.known_or_wait(run_id, _Waiting(then, otherwise))
        if real is not None:
            then(real)

    def give_up(self) -> int:
        """At the end of a search whose server stayed away: the kept writes are dropped,
        and those waiting on a run never created are told so. How many writes were kept."""
        with self._turn:
            dropped = len(self._kept)
            for write in self._kept:
                write.left = True
            self._kept.clear()
            self._turn.notify_all()
        for wait in self._stand_ins.abandoned():
            if wait.otherwise is not None:
                self._told(wait.otherwise)
        return dropped

    def flush(self, older_than_s: float = 0.0) -> None:
        """Write what waits; while the server is out of reach, start a retry when one is due."""
        if self._through():
            try:
                self.inner.flush(older_than_s)
            except Exception as exc:
                self._went_down(exc)
            return
        self._retries.start_if_due()

    def drain(self, timeout_s: float) -> int:
        """At a search's end: try the kept writes for up to ``timeout_s``; how many are left."""
        deadline = self._clock() + timeout_s
        while self.down_for() is not None and self._clock() < deadline:
            if self._retries.join(max(0.0, deadline - self._clock())):
                continue
            self._retry()
            if self.down_for() is not None:
                time.sleep(min(1.0, max(0.0, deadline - self._clock())))
        if self.down_for() is None:
            with contextlib.suppress(Exception):  # a last batch: the server may go again
                self.inner.flush()
        return self.kept()

    # The outage --------------------------------------------------------------------

    def _through(self) -> bool:
        """Whether writes go straight to the server (it answers, and nothing waits)."""
        with self._lock:
            return self._outage is None

    def _write(
        self, what: str, run_id: str, write: Callable[[str], Any], *, batched: bool = False
    ) -> None:
        kept = _Write(what, run_id, write, kept_on_failure=batched)
        if self._kept_while_down(kept):
            return
        real = self._stand_ins.resolved(run_id)  # a stand-in's run exists once the outage is over
        if real.startswith(PENDING_PREFIX):
            return  # its creation was refused (and said): there is no run to write to
        try:
            write(real)
        except Exception as exc:
            self._went_down(exc)
            if not batched:  # a batch's records are held beneath, sent with the next one
                self._keep(kept)

    def _kept_while_down(self, write: _Write) -> bool:
        """Keep ``write`` if an outage is on: decided under the lock, so that a write is
        never kept just after the retry thread found nothing left and ended the outage.
        While the server answers the kept writes, it then waits its turn."""
        with self._lock:
            if self._outage is None:
                return False
            self._kept.append(write)
            answering = self._outage.answering
        if answering and not getattr(self._replaying, "on", False):
            self._wait_turn(write)
        return True

    def _wait_turn(self, write: _Write) -> None:
        """Wait until the retry has written ``write`` (at most :data:`CATCH_UP_WAIT_S`), or
        the server stops answering: what waiting on a write straight to it would cost."""
        self._retries.start_if_due(now=True)  # a retry under way, or one now
        deadline = time.monotonic() + CATCH_UP_WAIT_S  # a real wait: not the clock's
        with self._turn:
            while not write.left and self._outage is not None and self._outage.answering:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._turn.wait(left)

    def _keep(self, write: _Write) -> None:
        with self._lock:
            self._kept.append(write)

    def _went_down(self, exc: Exception) -> None:
        """A write found the server out of reach: the outage starts (other errors are raised)."""
        if not unreachable(exc):
            raise exc
        with self._lock:
            if self._outage is not None:
                return
            self._outage = _Outage(self._clock())
            self._retries.restart()
        when = time.strftime("%H:%M:%S", time.localtime(self._wall()))
        self._say(
            f"tracking server {self.uri} unreachable since {when}: the search goes on; "
            f"its MLflow writes are kept and tried again every {self._retry_s:g} s"
        )

    def _retry(self) -> None:
        """Write the kept writes, oldest first, until one fails or none is left (those
        kept meanwhile too)."""
        self._replaying.on = True
        try:
            while self._replay() and not self._back():
                pass
        finally:
            self._replaying.on = False
            with self._turn:  # whoever waits on this retry: it is over
                self._turn.notify_all()

    def _replay(self) -> bool:
        """Write the kept writes, oldest first, until one fails or none is left; whether
        the server answered throughout."""
        for write in self._oldest_first():
            run_id = self._stand_ins.resolved(write.run_id)
            if run_id.startswith(PENDING_PREFIX) and not write.creates:
                self._done_with(write)  # its run's creation was refused (and said)
                continue
            try:
                write.write(run_id)
            except Exception as exc:
                if not unreachable(exc):
                    # Refused, not out of reach (a run deleted meanwhile): dropped, said.
                    self._say(f"tracking: {write.what} of run {write.run_id} not written: {exc}")
                    self._done_with(write, answered=True)
                    continue
                if write.kept_on_failure:
                    self._done_with(write)
                self._silent()
                return False
            self._done_with(write, answered=True)
        try:  # the batches held beneath, and the proof that the server answers again
            self.inner.flush()
        except Exception as exc:
            if unreachable(exc):
                self._silent()
                return False
            # Refused (dropped beneath): the server answered, so the outage is over.
            self._say(f"tracking: a batch of kept writes not written: {exc}")
        return True

    def _silent(self) -> None:
        """The server did not answer the retry: new writes are kept without waiting."""
        with self._turn:
            if self._outage is not None:
                self._outage.answering = False
            self._turn.notify_all()

    def _oldest_first(self) -> Iterator[_Write]:
        while True:
            with self._lock:
                if not self._kept:
                    return
                write = self._kept[0]
            yield write

    def _done_with(self, write: _Write, *, answered: bool = False) -> None:
        """``write`` leaves the queue (``answered``: the server answered it)."""
        with self._turn:
            if self._kept and self._kept[0] is write:
                self._kept.popleft()
                write.left = True
                if self._outage is not None:
                    self._outage.done(self._clock() if answered else None)
                self._turn.notify_all()

    def _back(self) -> bool:
        """Every kept write landed: writes go straight to the server again. Whether the
        outage is over (``False``: writes were kept meanwhile, to write next)."""
        with self._turn:
            if self._outage is None:
                return True
            if self._kept:
                return False
            lasted = self._clock() - self._outage.since
            landed, self._outage = self._outage.landed, None
            self._turn.notify_all()
        self._say(
            f"tracking server {self.uri} reachable again after {lasted:.0f} s: "
            f"{landed} kept write(s) landed"
        )
        return True

    def _created(self, stand_in: str, real: str) -> None:
        for wait in self._stand_ins.created(stand_in, real):
            self._told(functools.partial(wait.then, real))

    def _told(self, call: Callable[[], None]) -> None:
        """A waiting caller told of its run: its failure said, never the retry's."""
        try:
            call()
        except Exception as exc:  # e.g. the study's storage busy: one line, the rest go on
            self._say(f"tracking: recording a run created late failed: {exc}")
