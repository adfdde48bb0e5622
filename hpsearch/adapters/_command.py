"""Running a training script as it is: one process per trial, its JSON lines as reports.

``train: {command: python train.py --lr {lr}, metrics: stdout-jsonl}`` makes every
trial run the command with its parameters filled in. The script reports by
printing one JSON object per line::

    print(json.dumps({"step": epoch, "val_accuracy": acc, "samples": n}), flush=True)

A line with an integer ``step`` is one report (``ctx.report``); a JSON object
without ``step`` gives final metrics (as a training function's return value);
any other line is ordinary output. With ``samples`` (examples processed since
the previous report) and no ``samples_per_sec``, the rate is added. With
``metrics: file-jsonl`` the same lines are read from ``metrics_file`` as the
script appends them.

The script's environment: ``HPSEARCH_TRIAL_NUMBER``, ``HPSEARCH_SEED``,
``HPSEARCH_TRIAL_DIR`` (its own folder, kept), ``HPSEARCH_CHECKPOINT_DIR`` (kept
for its re-run when it is interrupted; resume from what is there),
``HPSEARCH_PARAMS`` (the parameters as JSON), ``HPSEARCH_METRICS_FILE`` and
``CUDA_VISIBLE_DEVICES`` (the GPU placement chose, by UUID where NVML reads one;
empty on CPU), and
``HPSEARCH_GPU_MEMORY_CAP_MB`` when it shares its GPU (its share, for the script
to pass to ``torch.cuda.set_per_process_memory_fraction``). However the trial
ends, the script's process group gets SIGTERM, and what is left of it SIGKILL
after ``stop_grace``; a script that
exits non-zero fails the trial with its last stderr lines, or is pruned as out
of memory when they say CUDA ran out.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from hpsearch._procs import descendants, group_running
from hpsearch.adapters.trial_apis import FOLDER as TRIAL_APIS
from hpsearch.oom import device_oom
from hpsearch.space import flat_names
from hpsearch.trial.context import TrialContext, TrialPruned
from hpsearch.trial.script import (
    PARAMS_FILE,
    CommandSpec,
    activated_path,
    arg_form,
    expand,
    fill,
    with_trial_variables,
)
from hpsearch.trial.text_metrics import TextMetrics, TextReader, shown

STDERR_KEPT_LINES = 30
"""The last stderr lines a failed script's error carries."""
_POLL_S = 0.2
KILLED_WAIT_S = 2.0
"""How long a trial's end waits for its SIGKILLed process group to be gone."""
_PR_SET_CHILD_SUBREAPER = 36  # prctl's option number (linux/prctl.h)
_LINGER_S = 5.0
"""How long a script's stdout or stderr may stay open after it exited (a leftover child
holds it)."""


class CommandFailed(RuntimeError):
    """The training script exited non-zero; the message starts with why, then its stderr tail.

    When the script ran out of GPU memory the first line quotes the CUDA error,
    so the worker's out-of-memory check recognises it as one.
    """


@dataclass
class _Report:
    step: int | None
    metrics: dict[str, float]
    echo: bool = False
    """Whether the line stays in the script's stdout log too: a Python dict it printed
    for people does; a JSON line, written for hpsearch, does not."""


@dataclass
class _Lines:
    """What the script's output threads hand the trial's thread."""

    reports: queue.Queue[_Report | None] = field(default_factory=queue.Queue)
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_KEPT_LINES))


def command_train(spec: CommandSpec, workdir: str, trial_dir: str) -> Callable[..., Any]:
    """The ``train(params, ctx)`` that runs ``spec``'s script for one trial.

    Args:
        spec: the ``train`` section.
        workdir: where the script runs (the driver's working directory), when it
            exists on this node; else the trial's folder.
        trial_dir: the trial's own folder (``HPSEARCH_TRIAL_DIR``).
    """

    def train(params: dict[str, Any], ctx: TrialContext) -> dict[str, float] | None:
        return run_command(spec, params, ctx, workdir=workdir, trial_dir=trial_dir)

    return train


def command_line(
    spec: CommandSpec,
    params: Mapping[str, Any],
    folder: str = ".",
    variables: Mapping[str, str] | None = None,
) -> list[str]:
    """The command's arguments with ``{name}`` replaced by each parameter's value, and an
    argument ``{args}`` (or another of :data:`~hpsearch.trial.script.ARG_FORMS`) by the
    parameters the trial has, in its form.

    A leading ``python`` (or ``python3``) is the interpreter hpsearch runs with,
    so the script sees the same environment whether or not it is activated.
    ``folder`` is the trial's own (where ``{args_json_file}`` is written);
    ``variables``, the script's environment, whose ``$HPSEARCH_...`` an argument may name.
    """
    arguments: list[str] = []
    params_file = os.path.join(folder, PARAMS_FILE)
    for argument in spec.arguments:
        form = arg_form(argument)
        if form is not None and form not in params:
            if form == "args_json_file":
                Path(params_file).write_text(json.dumps(dict(params)), encoding="utf-8")
            arguments += expand(form, params, params_file)
        else:
            arguments.append(with_trial_variables(fill(argument, params), variables or {}))
    if arguments and arguments[0] in ("python", "python3"):
        arguments[0] = sys.executable
    return arguments


def run_command(
    spec: CommandSpec,
    params: dict[str, Any],
    ctx: TrialContext,
    *,
    workdir: str,
    trial_dir: str,
) -> dict[str, float] | None:
    """Run the script for one trial, reporting its JSON lines; return its final metrics.

    Raises:
        TrialPruned: the pruner stopped it (its process group was ended).
        CommandFailed: it exited non-zero (out of memory included: see the class).
    """
    folder = Path(trial_dir or Path.cwd())
    folder.mkdir(parents=True, exist_ok=True)
    metrics_file = folder / spec.metrics_file
    with contextlib.suppress(FileNotFoundError):
        metrics_file.unlink()  # a re-run's own reports only
    env = {
        **os.environ,
        **spec.env,
        "HPSEARCH_TRIAL_NUMBER": str(ctx.trial_number),
        "HPSEARCH_SEED": str(ctx.seed),
        "HPSEARCH_TRIAL_DIR": str(folder),
        "HPSEARCH_CHECKPOINT_DIR": str(ctx.checkpoint_dir),
        "HPSEARCH_PARAMS": json.dumps(params),
        "HPSEARCH_METRICS_FILE": str(metrics_file),
        "PYTHONUNBUFFERED": "1",  # reports arrive as printed, not at exit
    }
    env["PATH"] = activated_path(env.get("PATH"))  # torchrun beside hpsearch, say
    # An NNI trial script's `import nni`, and a W&B sweep's script's `import wandb`, find
    # their trial APIs answered by hpsearch.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [TRIAL_APIS, env.get("PYTHONPATH")]))
    if not ctx.resources.get("GPU"):
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU trial keeps off the GPUs
    if ctx.memory_cap_mb is not None:  # its share of a GPU it shares with other trials
        env["HPSEARCH_GPU_MEMORY_CAP_MB"] = f"{ctx.memory_cap_mb:.0f}"
    spared = set(descendants(os.getpid()))  # what this worker ran before the script
    subreaper = _subreaper(True)
    process = subprocess.Popen(
        command_line(spec, params, str(folder), env),
        cwd=workdir if workdir and os.path.isdir(workdir) else folder,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: a stop reaches its workers too
        preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl, before exec
    )
    lines = _Lines()
    text = TextReader(spec.metrics) if isinstance(spec.metrics, TextMetrics) else None
    readers = [
        _thread(_read_stdout, process.stdout, lines, spec.metrics != "file-jsonl", text),
        _thread(_read_stderr, process.stderr, lines, text if text and text.spec.stderr else None),
    ]
    try:
        final = _follow(process, lines, ctx, metrics_file if spec.metrics == "file-jsonl" else None)
    finally:
        # However the trial ends (the script done, pruned, failed, stopped), nothing it
        # started outlives it: what is left of its process group goes too.
        _stop(process, spec.stop_grace, spared)
        if subreaper:
            _subreaper(False)
        for reader in readers:
            reader.join(timeout=5)
    if process.returncode != 0:
        raise CommandFailed(_failure(process.returncode, list(lines.stderr_tail)))
    unmatched = text.never_matched() if text is not None else []
    if unmatched:
        raise CommandFailed(
            f"{' and '.join(unmatched)} never matched the script's output; compare it with "
            "a line the script prints (the trial's stdout log has them all)"
        )
    return final


def _follow(
    process: subprocess.Popen[bytes], lines: _Lines, ctx: TrialContext, file: Path | None
) -> dict[str, float] | None:
    """Report what the script reports until it exits (stopping it when the pruner says so);
    return its final metrics."""
    tail = _FileTail(file) if file is not None else None
    progress = _Progress(ctx)
    # Its stdout and stderr, each read to its end: a line of stderr read after stdout
    # closed is a report still (logging's, with stderr: true), under load too.
    streams_open = 2
    exited_at: float | None = None
    while True:
        batch: list[_Report] = []
        try:
            item = lines.reports.get(timeout=_POLL_S)
        except queue.Empty:
            item = _NOTHING
        if item is None:
            streams_open -= 1
        elif item is not _NOTHING:
            batch.append(item)
        if exited_at is None and process.poll() is not None:
            exited_at = time.monotonic()
        if streams_open and exited_at is not None and time.monotonic() - exited_at > _LINGER_S:
            # The script is gone but something it started still holds its output open:
            # its process group goes too, or the trial would never end.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            streams_open = 0
        exited = not streams_open and exited_at is not None
        if tail is not None:
            batch += tail.read()  # after the exit: the last lines too
        for report in batch:
            progress.take(report)
        if exited:
            return progress.final or None


_NOTHING = _Report(None, {})


class _Progress:
    """Turns the script's lines into ``ctx.report`` calls, the sample rate added."""

    def __init__(self, ctx: TrialContext) -> None:
        self._ctx = ctx
        self._last_at = time.monotonic()
        self.final: dict[str, float] = {}

    def take(self, report: _Report) -> None:
        if report.step is None:
            self.final.update(report.metrics)
            return
        now = time.monotonic()
        metrics = dict(report.metrics)
        if "samples" in metrics and "samples_per_sec" not in metrics and now > self._last_at:
            metrics["samples_per_sec"] = metrics["samples"] / (now - self._last_at)
        self._last_at = now
        self._ctx.report(report.step, metrics)
        if self._ctx.should_prune():
            raise TrialPruned(f"pruned after step {report.step}")


_SCALAR_REPR = re.compile(
    r"\b(?:(?:np|numpy|torch)\.)?(?:float\d*|int\d*|tensor)\(\s*([-+]?[\w.]+)[^()]*\)"
)
"""A number's repr inside a printed dict: NumPy 2's ``np.float64(0.81)``, a 0-d tensor's
``tensor(0.5, device='cuda:0')``, read as the number."""
_NOT_FINITE = {"nan": "None", "inf": "1e999"}
"""``float('nan')`` and ``inf`` as a printed dict shows them: a literal the parse takes
(a NaN is left out; ``1e999`` is infinity)."""
_NOT_FINITE_WORD = re.compile(r"\b(nan|inf)\b")

_PYTHON_DICT_MAX_CHARS = 100_000
"""Longer lines are not read as a printed dict (the parse is not worth it)."""


def parse_line(text: str, *, python: bool = False) -> _Report | None:
    """A report (with ``step``) or final metrics (without) from one line; ``None``: not JSON.

    With ``python``, a printed Python dict is read too, as Hugging Face's ``Trainer``
    prints its logs (``{'eval_loss': 0.5, 'eval_accuracy': np.float64(0.81), 'epoch':
    1.0}``): its numbers are final metrics (or a report, with an integer ``step``), and
    the line stays in the script's output.
    """
    text = text.strip()
    if not text.startswith("{"):
        return None
    echo = False
    try:
        data = json.loads(text)
    except ValueError:
        if not (python and text.endswith("}") and len(text) <= _PYTHON_DICT_MAX_CHARS):
            return None
        try:
            literal = _SCALAR_REPR.sub(r"\1", text)
            literal = _NOT_FINITE_WORD.sub(lambda m: _NOT_FINITE[m.group(1)], literal)
            data = ast.literal_eval(literal)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
        echo = True
    if not isinstance(data, dict):
        return None
    step = data.pop("step", None)
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        return None
    metrics = _numbers_in(data)
    return _Report(step, metrics, echo) if metrics else None


def _numbers_in(data: Mapping[str, Any]) -> dict[str, float]:
    """A JSON object's numbers, a nested object's named ``outer/inner`` as Tune names a
    nested result's (``{"val": {"acc": 0.9}}`` is ``val/acc``); not its booleans."""
    return {
        name: float(value)
        for name, value in flat_names(data, separator="/").items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


def _read_stdout(
    stream: IO[bytes], lines: _Lines, reports: bool, text: TextReader | None = None
) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        # A printed dict is read as metrics unless patterns or scalars read the text.
        report = parse_line(line, python=text is None) if reports else None
        if report is None:
            os.write(1, raw)  # the script's own output, into the trial's stdout log
            read = text.read(line) if text is not None else None
            if read is not None:
                lines.reports.put(_Report(*read))
        else:
            if report.echo:
                os.write(1, raw)
            lines.reports.put(report)
    lines.reports.put(None)


def _read_stderr(stream: IO[bytes], lines: _Lines, text: TextReader | None = None) -> None:
    for raw in iter(stream.readline, b""):
        os.write(2, raw)
        line = raw.decode(errors="replace")
        lines.stderr_tail.append(shown(line).rstrip())  # a progress bar: its last drawing
        read = text.read(line) if text is not None else None
        if read is not None:
            lines.reports.put(_Report(*read))
    lines.reports.put(None)


class _FileTail:
    """New complete lines of a metrics file the script appends to."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0

    def read(self) -> list[_Report]:
        try:
            with self._path.open("rb") as file:
                file.seek(self._offset)
                data = file.read()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        found = (parse_line(line) for line in complete.decode(errors="replace").splitlines())
        return [report for report in found if report is not None]


def _thread(target: Callable[..., None], *args: Any) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _stop(process: subprocess.Popen[bytes], grace_s: float, spared: set[int]) -> None:
    """SIGTERM the script's process group and every other process it started (one that
    left the group with ``setsid``); SIGKILL what is left of them after ``grace_s``.

    The group is killed even when the script itself ended in time: a child it
    started that ignores SIGTERM would outlive the trial otherwise. Its other
    descendants are this worker's (whose processes, ``spared``, are not the
    script's): below the script, or adopted by the worker, a subreaper, once
    their parent ended.
    """
    deadline = time.monotonic() + grace_s
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    _signal_each(_started_by(process, spared), signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    # Zombies do not count: one the worker adopted waits for _reap below.
    while _group_running(process.pid) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    _reap(_signal_each(_started_by(process, spared), signal.SIGKILL))
    # SIGKILL is delivered, not awaited: the trial ends once its group is gone (or, on a
    # loaded machine, after a short while more), not while a child is still dying.
    gone_by = time.monotonic() + KILLED_WAIT_S
    while _group_running(process.pid) and time.monotonic() < gone_by:
        time.sleep(_POLL_S / 4)


def _started_by(process: subprocess.Popen[bytes], spared: set[int]) -> list[int]:
    """This worker's descendants but the script and what it ran before the script."""
    return [pid for pid in descendants(os.getpid()) if pid != process.pid and pid not in spared]


def _signal_each(pids: list[int], signum: int) -> list[int]:
    """Send ``signum`` to each of ``pids``; return those it reached."""
    reached = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
            reached.append(pid)
    return reached


def _reap(pids: list[int]) -> None:
    """Collect the exit of those of ``pids`` this worker adopted (no zombie is left)."""
    gone_by = time.monotonic() + KILLED_WAIT_S
    waiting = list(pids)
    while waiting and time.monotonic() < gone_by:
        for pid in list(waiting):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == 0:
                    continue  # still dying
            except ChildProcessError:
                pass  # not this worker's child: its own parent collects it
            waiting.remove(pid)
        if waiting:
            time.sleep(_POLL_S / 4)


def _subreaper(on: bool) -> bool:
    """Make this worker adopt the orphans of what it runs (Linux's child subreaper), so a
    script's child that left its group is still found; whether that was possible."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _group_alive(group: int) -> bool:
    """Whether any process of process group ``group`` is left."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _group_running(group: int) -> bool:
    """Whether a process of group ``group`` still runs (a zombie, dead but not yet reaped by
    whoever adopted it, does not); where ``/proc`` cannot tell, :func:`_group_alive`."""
    if not _group_alive(group):
        return False  # the common case, no member left: no /proc scan
    running = group_running(group)
    return True if running is None else running


def _failure(returncode: int, stderr: list[str]) -> str:
    """Why the script failed: its out-of-memory line first when there is one."""
    how = (
        f"killed by signal {-returncode} ({signal.Signals(-returncode).name})"
        if returncode < 0 and -returncode in signal.valid_signals()
        else f"exit code {returncode}"
    )
    oom = next((line for line in reversed(stderr) if device_oom(RuntimeError(line))), None)
    head = (
        f"the command ran out of GPU memory ({how}): {oom.strip()}"
        if oom
        else f"the command failed: {how}"
    )
    lines = list(stderr)
    flag = _VALUED_FLAG.search(lines[-1]) if lines else None
    if flag:  # the line a failure is known by, with what to write instead
        lines[-1] += (
            f"; {flag[1]} is a flag (action='store_true'), which takes no value: give the "
            f"parameters with {{args_no_boolean_flags}} ({flag[1]} for true, nothing for false)"
        )
    body = "\n".join(lines) if lines else "(no stderr)"
    return f"{head}\nits last stderr lines:\n{body}"


_VALUED_FLAG = re.compile(r"argument (-[^:\s/]+)(?:/-\S+)?: ignored explicit argument")
"""argparse's refusal of ``--amp=True`` for a ``store_true`` flag (``{args}`` passes one)."""


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the worker dies (Linux), so no script outlives
    a killed or timed-out trial worker."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
