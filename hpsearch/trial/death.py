"""A worker that dies hard (``os._exit``, SIGKILL, a segfault) leaves its stderr and exit behind.

Ray reports such a death as little more than "the actor died" and a list of
possible causes. While a trial runs, its worker's stderr (file descriptor 2:
Python's and any C library's output) goes to a file the driver can read, with
:mod:`faulthandler` writing there on a fatal signal. Where hpsearch started Ray
itself, each worker runs under a reaper (``_reaper.py``, its parent process),
which writes how the worker ended. When a worker dies without an end event the
driver puts its exit code or signal, the last lines of its stderr and the fatal
error they name in the trial's record.
"""

from __future__ import annotations

import faulthandler
import os
import re
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from hpsearch.trial.text_metrics import shown

TAIL_LINES = 50
"""How many of a dead worker's last stderr lines its trial's record keeps."""

_FATAL = re.compile(r"Fatal Python error: (?P<what>[^\n]+)")
_NEVER_STARTED = "worker startup repeatedly failed"
"""Ray's words for a trial whose worker process never started (after minutes of retries)."""
NEVER_STARTED_FIX = (
    "Ray could not start a Python worker for it: run python -c 'import ray' in the folder "
    "hpsearch ran in to see why (a file there named as a module Python or a library "
    "imports, a broken package on PYTHONPATH, a failing sitecustomize)"
)
"""What a trial whose worker never started is told to look at."""

EXITED_FIX = (
    "the trial's code ended its process before it returned, as os._exit(0) does: "
    "return from train instead"
)
"""What a trial whose worker exited with code 0 (not a crash: an exit) is told."""

OUTPUT_KEPT_BYTES = 4 * 1024 * 1024
"""How much of a trial's stdout or stderr its MLflow run keeps (the end)."""

OUTPUT_BOUND_BYTES = 4 * OUTPUT_KEPT_BYTES
"""How large a trial's stdout or stderr file may grow while it runs: past it, the file
is cut to its last ``OUTPUT_KEPT_BYTES``, so a trial printing without end cannot fill
the disk (the files live in the driver's temporary folder, often memory)."""

WORKER_DIED = "trial worker died"
TIMED_OUT = "timeout"
HUNG = "hung"
NODE_LOST = "its node was lost"
ENDINGS_SEEN = (WORKER_DIED, TIMED_OUT, HUNG, NODE_LOST)
"""How the records of the ends hpsearch saw happen to a trial's worker begin: each
leads with what happened (the runner's words and the stderr's last lines follow)."""

_SEEN_END = re.compile("|".join(rf"{re.escape(ending)}[:;]" for ending in ENDINGS_SEEN))

HEADLINE_CHARS = 500
"""The most of a trial's error one line shows (the whole is in its record)."""


def headline(error: str) -> str:
    """The line of a trial's error that says what happened.

    A record of an end hpsearch saw (:data:`ENDINGS_SEEN`) leads with it; a Python
    traceback ends with it (the exception), as does a script's stderr.
    """
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return "unknown error"
    first = lines[0]
    if _SEEN_END.match(first) or len(lines) == 1:
        return first[:HEADLINE_CHARS]
    return lines[-1][:HEADLINE_CHARS]


EXITS = "exits"
"""The subfolder of the workers' folder where the reaper writes each worker's exit."""

EXIT_WAIT_S = 2.0
"""How long the driver waits for a dead worker's exit: Ray may notice the death first."""


@dataclass(frozen=True)
class WorkerExit:
    """How a worker process ended: its exit code, or minus the signal that killed it."""

    code: int

    @property
    def signal(self) -> int | None:
        """The signal that killed the worker (``None``: it exited)."""
        return -self.code if self.code < 0 else None

    def describe(self) -> str:
        """``exit code 3``, or ``killed by signal 9 (SIGKILL)``."""
        number = self.signal
        if number is None:
            return f"exit code {self.code}"
        try:
            name = signal.Signals(number).name
        except ValueError:
            return f"killed by signal {number}"
        return f"killed by signal {number} ({name})"


def reaper_command(folder: Path) -> str:
    """Ray's ``py_executable`` that runs each worker under the reaper, writing into ``folder``.

    Makes the reaper's folder now: its being there tells :func:`worker_exit` to
    wait for a dead worker's exit, which Ray may report before the reaper writes it.
    """
    (folder / EXITS).mkdir(parents=True, exist_ok=True)
    script = Path(__file__).with_name("_reaper.py")
    return shlex.join([sys.executable, str(script), str(folder / EXITS), sys.executable])


def worker_exit(
    folder: str,
    pid: int | None,
    wait_s: float = EXIT_WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
) -> WorkerExit | None:
    """How worker ``pid`` ended, as its reaper wrote in ``folder``; ``None``: not known.

    Waits up to ``wait_s`` for the reaper to write it.
    """
    if not folder or pid is None:
        return None
    path = Path(folder) / EXITS / f"{pid}.exit"
    waited = 0.0
    while True:
        try:
            return WorkerExit(int(path.read_text(encoding="ascii")))
        except (OSError, ValueError):
            if waited >= wait_s or not path.parent.is_dir():
                return None  # no reaper here (Ray joined by address), or it did not write
        sleep(0.1)
        waited += 0.1


def output_file(folder: str, number: int, stream: str) -> str:
    """Where trial ``number``'s ``stream`` (``stdout`` or ``stderr``) goes in ``folder``
    (empty: no folder, nowhere)."""
    return str(Path(folder) / f"trial-{number}.{stream}") if folder else ""


def stderr_file(folder: str, number: int) -> str:
    """Where trial ``number``'s stderr goes in ``folder`` (empty: no folder, nowhere)."""
    return output_file(folder, number, "stderr")


@dataclass(frozen=True)
class OutputBound:
    """How a trial's output files are kept small while it runs.

    Attributes:
        limit: the size, in bytes, past which a file is cut.
        keep: how many of its last bytes a cut file keeps.
        every_s: how often the files' sizes are looked at (a ``fstat``: microseconds).
    """

    limit: int = OUTPUT_BOUND_BYTES
    keep: int = OUTPUT_KEPT_BYTES
    every_s: float = 0.25


def cut_to_tail(fd: int, limit: int, keep: int, writer: int | None = None) -> int:
    """Cuts the file open on ``fd`` (read and append) to its last ``keep`` bytes if it is
    over ``limit``, a line saying so first; returns how many bytes were left out.

    ``writer``: the same file open for writing without appending. The line and the tail
    are then written over the file's start and the rest cut off, so the line is always
    first; others' appends meanwhile are lost, microseconds of them, against a file that
    would otherwise fill the disk. Without it, the file is emptied and rewritten through
    ``fd``, and what others append between the two lands before the line (a trial
    printing in a tight loop did so at every cut).
    """
    size = os.fstat(fd).st_size
    if size <= limit:
        return 0
    dropped = size - keep
    tail = os.pread(fd, keep, dropped)
    kept = f"[{dropped} bytes left out while the trial ran]\n".encode() + tail
    if writer is not None:
        os.pwrite(writer, kept, 0)
        os.ftruncate(writer, len(kept))
    else:
        os.ftruncate(fd, 0)
        os.write(fd, kept)
    return dropped


@contextmanager
def captured_output(
    stdout_path: str, stderr_path: str, bound: OutputBound = OutputBound()
) -> Iterator[None]:
    """Within the block, file descriptors 1 and 2 write to these files (empty: left alone).

    Python's and any C library's output alike; fatal signals are dumped to the stderr
    file. A thread keeps each file within ``bound`` while the block runs.
    """
    with ExitStack() as stack:
        fds = [
            (stack.enter_context(_redirected(fd, path)), path)
            for fd, path in ((1, stdout_path), (2, stderr_path))
            if path
        ]
        stack.enter_context(_bounded(fds, bound))
        yield


@contextmanager
def _redirected(fd: int, path: str) -> Iterator[int]:
    """Points ``fd`` at ``path`` (appended to) within the block; yields the file's own fd."""
    stream = sys.stdout if fd == 1 else sys.stderr
    stream.flush()
    saved = os.dup(fd)
    # Readable too: a cut keeps the file's tail (cut_to_tail).
    with open(path, "a+b", buffering=0) as log:
        os.dup2(log.fileno(), fd)
        if fd == 2:
            faulthandler.enable(file=log, all_threads=False)
        try:
            yield log.fileno()
        finally:
            if fd == 2:
                faulthandler.disable()
            stream.flush()
            os.dup2(saved, fd)
            os.close(saved)


@contextmanager
def _bounded(files: list[tuple[int, str]], bound: OutputBound) -> Iterator[None]:
    """Within the block, a thread cuts each file (its fd, its path) that grows past the
    bound, writing its start through an fd of its own (:func:`cut_to_tail`)."""
    if not files:
        yield
        return
    stop = threading.Event()
    with ExitStack() as writers:
        cuts = []
        for fd, path in files:
            writer = os.open(path, os.O_WRONLY)
            writers.callback(os.close, writer)
            cuts.append((fd, writer))

        def watch() -> None:
            while not stop.wait(bound.every_s):
                for fd, writer in cuts:
                    # A full disk, say: the trial's own writes fail and say so.
                    with suppress(OSError):
                        cut_to_tail(fd, bound.limit, bound.keep, writer)

        thread = threading.Thread(target=watch, name="hpsearch-output-bound", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def output_tail(path: str, limit: int = OUTPUT_KEPT_BYTES) -> str | None:
    """A trial's captured output, its last ``limit`` bytes when longer; ``None``: none."""
    try:
        with open(path, "rb") as log:
            size = log.seek(0, os.SEEK_END)
            if size == 0:
                return None
            log.seek(max(0, size - limit))
            text = log.read().decode(errors="replace")
    except OSError:
        return None
    if size > limit:
        return f"[first {size - limit} bytes left out]\n{text}"
    return text


_NODE_LOST = re.compile(r"because its node has died|NodeDiedError|node .{0,40}(?:is|was) dead")


def node_lost(crash: str) -> bool:
    """Whether the runner's error says the worker's node died (a lost machine, a stopped
    raylet): the trial did nothing wrong, and runs again rather than failing."""
    return bool(_NODE_LOST.search(crash))


def worker_death(crash: str, path: str, ended: WorkerExit | None = None) -> str:
    """The record of a worker that died without an end event: how it ended, the fatal
    error its stderr names, the runner's word, and the stderr's last lines."""
    kept = output_tail(path) if path else None
    # A progress bar's line (tqdm redraws it with carriage returns) as a terminal shows it.
    lines = [shown(line) for line in kept.rstrip("\n").split("\n")] if kept else []
    text = f"{WORKER_DIED}: {crash if ended is None else ended.describe()}"
    fatal = _FATAL.search("\n".join(lines))
    if fatal is not None:
        text += f" ({fatal['what']})"
    if _NEVER_STARTED in crash:
        text += f"; {NEVER_STARTED_FIX}"
    if ended is not None and ended.code == 0:
        # sys.exit raises SystemExit, which the worker catches: exit code 0 came from
        # os._exit or a C library's exit().
        text += f" ({EXITED_FIX})"
    if ended is not None:
        text += f"\nRay: {crash}"
    if lines:
        tail = "\n".join(lines[-TAIL_LINES:])
        text += f"\nlast {min(len(lines), TAIL_LINES)} line(s) of its stderr:\n{tail}"
    return text
