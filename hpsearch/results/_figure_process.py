"""The analysis figures drawn in a process of their own, on another core than the driver's.

The libraries the figures are drawn with (:data:`~hpsearch.results.FIGURE_LIBRARIES`:
Optuna's visualisation, plotly, scikit-learn through Optuna's importance package)
take 3 CPU-seconds to import on this project's 2-core machines. Imported in the
driver, on a thread beside the search, they held its interpreter lock while short
trials ended: 48 trials of 0.5 s packed 8 wide took 8.2-8.8 s from the first
trial's start to the last's, and 5.1-5.9 s without them (2026-11-28). Imported
after the search, the same 3 s are paid at its end. A process of its own imports
them on a core the driver does not use, and sends back each figure as the HTML
page MLflow's ``log_figure`` would have written.

One such process serves the driver's process for as long as it lives (a second
search in it, as in a notebook or the test suite, pays for no second import): it
starts at a search's first complete trial (:func:`start_figure_process`), draws when
the search ends (:func:`figure_pages`) and is stopped when the driver exits (a driver
killed closes its input, which ends it). Where the libraries are already imported in
the driver, or the process cannot draw, the figures are drawn in the driver, as before.

Run as ``python -m hpsearch.results._figure_process``: the process's own side.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import logging
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial

from hpsearch.results._analysis import FIGURE_LIBRARIES, analysis_figures, load_libraries
from hpsearch.results._study import StudyResults

logger = logging.getLogger(__name__)

DRAW_TIMEOUT_S = 120.0
"""How long the driver waits for the figures of one search. Drawing them in the driver
would take as long, so a process past it is stopped and the figures are left out."""
IMPORT_NICE = 19
"""How much the process lowers the priority of its imports: to the lowest."""
READY = b"R"
"""What the process writes once the figure libraries are imported: only then is it sent a
study (the driver never waits on its low-priority imports)."""
STOP_WAIT_S = 2.0
"""How long the driver waits for the killed process to be reaped."""


@dataclass(frozen=True)
class FigureRequest:
    """What the driver sends: the study's trials, as the figures need them.

    Attributes:
        directions: the study's objective directions.
        metric_names: the study's metric names (``None``: Optuna's defaults).
        trials: every trial, in number order (their user attributes show where a
            figure's point is hovered over).
    """

    directions: tuple[StudyDirection, ...]
    metric_names: tuple[str, ...] | None
    trials: tuple[FrozenTrial, ...]


@dataclass(frozen=True)
class FigureReply:
    """What the process sends back: each figure's artifact file and HTML page, or why none.

    Attributes:
        pages: ``(artifact file, HTML)`` per figure drawn.
        error: why the study could not be drawn there (the driver draws it itself).
    """

    pages: tuple[tuple[str, str], ...]
    error: str | None = None


class FigureProcessError(Exception):
    """The figure process could not answer (it ended, or sent what cannot be read)."""


def page(figure: object) -> str:
    """The HTML page of a plotly figure, as ``MlflowClient.log_figure`` writes it for a
    ``.html`` artifact (plotly.js from its CDN)."""
    html: str = figure.to_html(include_plotlyjs="cdn")  # type: ignore[attr-defined]
    return html


def analysis_pages(results: StudyResults) -> Iterator[tuple[str, str]]:
    """The study's figures drawn here, one at a time, each as its artifact file and page."""
    for artifact, figure in analysis_figures(results):
        yield artifact, page(figure)


def request_of(results: StudyResults) -> FigureRequest:
    """The request that draws ``results``' figures in the figure process."""
    study = results.study
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    names = study.metric_names
    return FigureRequest(tuple(study.directions), tuple(names) if names else None, tuple(trials))


def rebuilt_study(request: FigureRequest) -> optuna.Study:
    """An in-memory study holding the request's trials, numbered as they were."""
    with _quiet_optuna():
        study = optuna.create_study(directions=list(request.directions))
        if request.metric_names is not None:
            study.set_metric_names(list(request.metric_names))
    study.add_trials(request.trials)
    return study


class FigureProcess:
    """The driver's side of one figure process: starts it, sends it a study, reads the pages.

    Build it with :meth:`start`.
    """

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process
        self._ready = False

    @classmethod
    def start(cls, import_nice: int = IMPORT_NICE) -> FigureProcess:
        """Start the process; it imports the figure libraries at once, then waits.

        It imports hpsearch as this interpreter does (installed, or from the working
        directory); where it cannot, it ends, and the driver draws the figures itself.

        Args:
            import_nice: how much lower than the driver's the priority of its imports is.
        """
        process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(import_nice)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # its figures' notes; a failure comes back as a reply
        )
        return cls(process)

    @property
    def pid(self) -> int:
        """The process's id."""
        return self._process.pid

    @property
    def alive(self) -> bool:
        """Whether the process still runs."""
        return self._process.poll() is None

    def ready(self, wait_s: float = 0.0) -> bool:
        """Whether its figure libraries are imported (:data:`READY` read; waiting at most
        ``wait_s`` for it)."""
        stdout = self._process.stdout
        if not self._ready and stdout is not None and select.select([stdout], [], [], wait_s)[0]:
            self._ready = stdout.read(len(READY)) == READY
        return self._ready

    def draw(self, results: StudyResults, timeout_s: float = DRAW_TIMEOUT_S) -> FigureReply:
        """Send the study, wait for its figures' pages.

        Raises:
            FigureProcessError: the process has not imported the figure libraries yet,
                ended, or sent nothing readable.
            TimeoutError: no answer within ``timeout_s`` (the process is stopped).
        """
        stdin, stdout = self._process.stdin, self._process.stdout
        if stdin is None or stdout is None or not self.alive:
            raise FigureProcessError("the figure process is not running")
        if not self.ready():
            # Drawing here costs the imports again, at once: waiting for a process
            # of the lowest priority could cost any time.
            raise FigureProcessError("the figure libraries were still being imported there")
        try:
            pickle.dump(request_of(results), stdin, protocol=pickle.HIGHEST_PROTOCOL)
            stdin.flush()
            ready, _, _ = select.select([stdout], [], [], timeout_s)
            if not ready:
                self.stop()
                raise TimeoutError(f"the figures took over {timeout_s:.0f} s to draw")
            reply = pickle.load(stdout)
        except TimeoutError:
            raise
        except Exception as exc:  # a broken pipe, an end of file, a reply that cannot be read
            self.stop()
            raise FigureProcessError(
                f"the figure process ended (exit code {self._process.poll()}): {exc!r}"
            ) from exc
        if not isinstance(reply, FigureReply):
            self.stop()
            raise FigureProcessError(f"the figure process sent a {type(reply).__name__}")
        return reply

    def stop(self) -> None:
        """Kill the process and reap it: it holds nothing but its imports (a reply is read
        before :meth:`draw` returns), so it is not asked to end."""
        with contextlib.suppress(OSError):
            self._process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(STOP_WAIT_S)
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):  # what was left unsent is dropped
                    pipe.close()


def _loaded_here() -> bool:
    return all(name in sys.modules for name in FIGURE_LIBRARIES)


class SharedFigures:
    """The figure process of this driver process, shared by its searches.

    Args:
        loaded_here: whether the figure libraries are imported in this process (then
            the figures are drawn here: no process is needed for them).
    """

    def __init__(self, loaded_here: Callable[[], bool] = _loaded_here) -> None:
        self._loaded_here = loaded_here
        self._process: FigureProcess | None = None
        self._lock = threading.Lock()

    @property
    def process(self) -> FigureProcess | None:
        """The process, where one was started and has not failed."""
        return self._process

    def start(self) -> None:
        """Start the process where the libraries are not imported here and none runs."""
        if self._loaded_here():
            return
        with self._lock:
            if self._process is not None and self._process.alive:
                return
            try:
                self._process = FigureProcess.start()
            except Exception as exc:  # any refusal: the driver draws them, as before
                logger.info("figures drawn in the driver: %s", exc)

    def pages(self, results: StudyResults) -> list[tuple[str, str]]:
        """The study's figures, each as its artifact file and HTML page: drawn by the
        process where one runs, has imported the libraries, and they are not imported
        here; else here (and the process, no longer needed, is stopped)."""
        with self._lock:
            process, self._process = self._process, None
            if process is None:
                return list(analysis_pages(results))
            if self._loaded_here():
                process.stop()
                return list(analysis_pages(results))
            try:
                reply = process.draw(results)
            except TimeoutError as exc:
                logger.warning("no analysis figures on the parent run: %s", exc)
                return []
            except FigureProcessError as exc:
                process.stop()
                logger.info("figures drawn in the driver: %s", exc)
                return list(analysis_pages(results))
            if reply.error is not None:
                process.stop()
                logger.info("figures drawn in the driver: %s", reply.error)
                return list(analysis_pages(results))
            self._process = process  # it serves the next search too
            return list(reply.pages)

    def close(self) -> None:
        """End the process (at the driver's exit: no subprocess is left for Python to warn of)."""
        with self._lock:
            if self._process is not None:
                self._process.stop()
                self._process = None


_SHARED = SharedFigures()
atexit.register(_SHARED.close)


def start_figure_process() -> None:
    """Where the figure libraries are not imported in this process, start the process
    that draws the figures, unless one runs already (one per driver process)."""
    _SHARED.start()


def figure_pages(results: StudyResults) -> list[tuple[str, str]]:
    """The study's figures, each as its artifact file and HTML page: drawn by the figure
    process where one runs and the libraries are not imported here, else here."""
    return _SHARED.pages(results)


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Optuna's note of a new in-memory study, and the experimental warning, unsaid."""
    import warnings

    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        optuna.logging.set_verbosity(level)


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    """The process's loop: a reply for each request, until the driver closes its input."""
    while True:
        try:
            request = pickle.load(requests)
        except EOFError:
            return
        try:
            results = StudyResults(rebuilt_study(request))
            reply = FigureReply(tuple(analysis_pages(results)))
        except Exception as exc:  # sent back: the driver draws the figures itself
            reply = FigureReply((), f"{type(exc).__name__}: {exc}")
        pickle.dump(reply, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()


def main() -> None:
    """Serve the driver on standard input and output while a thread of its own imports
    the figure libraries, then says so (:data:`READY`)."""
    # Ctrl-C reaches the driver's whole process group: the driver decides, and this
    # process ends when the driver closes its input (killed, too).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Replies go out on the original standard output alone: whatever a library
    # prints goes to standard error instead of into a reply.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    nice = int(sys.argv[1]) if len(sys.argv) > 1 else IMPORT_NICE
    threading.Thread(target=_load_then_say, args=(replies, nice), daemon=True).start()
    serve(sys.stdin.buffer, replies)


def _load_then_say(replies: IO[bytes], nice: int) -> None:
    """Import the figure libraries at a priority ``nice`` lower, then write :data:`READY`.

    Background work: the imports take a core nobody else wants (beside short trials
    the driver holds one core and its trials little), never one a starting trial
    worker or the driver needs. Lowered for this thread alone (Linux's threads have a
    priority each; elsewhere it stays as it was): a priority lowered cannot be raised
    back, and the figures are drawn, on the main thread, while the driver waits.
    """
    with contextlib.suppress(OSError, AttributeError):
        me = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, me, os.getpriority(os.PRIO_PROCESS, me) + nice)
    load_libraries(list(FIGURE_LIBRARIES))
    replies.write(READY)
    replies.flush()


if __name__ == "__main__":
    # Run by its module's own name, not as __main__: the replies' classes must be the
    # ones the driver unpickles them as.
    importlib.import_module("hpsearch.results._figure_process").main()
