"""A worker that dies hard leaves its stderr: captured while the trial runs, read at its death."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hpsearch.trial.death import (
    EXITED_FIX,
    NEVER_STARTED_FIX,
    TAIL_LINES,
    OutputBound,
    WorkerExit,
    captured_output,
    cut_to_tail,
    headline,
    output_file,
    output_tail,
    reaper_command,
    stderr_file,
    worker_death,
    worker_exit,
)


def test_output_written_by_any_code_goes_to_the_trials_files_while_it_runs(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    err, out = stderr_file(str(tmp_path), 7), output_file(str(tmp_path), 7, "stdout")
    assert (err, out) == (str(tmp_path / "trial-7.stderr"), str(tmp_path / "trial-7.stdout"))
    with captured_output(out, err):
        os.write(2, b"from C, on fd 2\n")
        os.write(1, b"from C, on fd 1\n")
        os.write(1, b"from Python\n")  # a worker's sys.stdout is fd 1 (pytest's is not)
    os.write(1, b"the test's own again\n")
    assert Path(err).read_text() == "from C, on fd 2\n"
    assert Path(out).read_text() == "from C, on fd 1\nfrom Python\n"
    assert capfd.readouterr().out == "the test's own again\n"
    assert stderr_file("", 7) == ""
    assert output_tail(out) == "from C, on fd 1\nfrom Python\n"
    assert output_tail(out, limit=12) == "[first 16 bytes left out]\nfrom Python\n"
    assert output_tail(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("own_writer", [False, True])
def test_a_file_past_its_bound_keeps_its_tail_and_says_how_much_it_left_out(
    tmp_path: Path, own_writer: bool
) -> None:
    path = tmp_path / "trial-1.stdout"
    with open(path, "a+b", buffering=0) as log:
        # With a writer of its own, the line is written over the file's start: first,
        # whatever the trial appends meanwhile.
        writer = os.open(path, os.O_WRONLY) if own_writer else None
        log.write(b"0123456789" * 10)
        assert cut_to_tail(log.fileno(), limit=100, keep=4, writer=writer) == 0  # at the bound
        log.write(b"abcd")
        assert cut_to_tail(log.fileno(), limit=100, keep=4, writer=writer) == 100
        log.write(b"\nnext")  # the trial's writes still go to the end
        if writer is not None:
            os.close(writer)
    assert path.read_text() == "[100 bytes left out while the trial ran]\nabcd\nnext"


def test_a_trial_printing_without_end_is_kept_within_the_bound_while_it_runs(
    tmp_path: Path,
) -> None:
    out, err = output_file(str(tmp_path), 2, "stdout"), stderr_file(str(tmp_path), 2)
    bound = OutputBound(limit=64 * 1024, keep=1024, every_s=0.01)
    line = b"x" * 1023 + b"\n"
    written = 0
    with captured_output(out, err, bound):
        # Printed until the watching thread has cut the file (or for 30 s: a failure).
        deadline = time.monotonic() + 30
        while not Path(out).read_bytes().startswith(b"[") and time.monotonic() < deadline:
            written += os.write(1, line)
        os.write(1, b"the end\n")
    kept = Path(out).read_bytes()
    assert written > bound.limit
    assert kept.startswith(b"[")
    assert b" bytes left out while the trial ran]\n" in kept
    assert kept.endswith(line + b"the end\n")
    assert len(kept) < written


def test_the_record_of_a_death_keeps_the_signal_and_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "trial-1.stderr"
    lines = [f"line {i}" for i in range(80)] + ["Fatal Python error: Segmentation fault"]
    log.write_text("\n".join(lines) + "\n")

    text = worker_death("the actor died", str(log))

    head, *tail = text.splitlines()
    assert head == "trial worker died: the actor died (Segmentation fault)"
    assert tail[0] == f"last {TAIL_LINES} line(s) of its stderr:"
    assert tail[1:] == lines[-TAIL_LINES:]
    assert worker_death("the actor died", str(tmp_path / "missing")) == (
        "trial worker died: the actor died"
    )


def test_a_records_headline_is_the_line_that_says_what_happened(tmp_path: Path) -> None:
    log = tmp_path / "trial-1.stderr"
    log.write_text("loading data\nSegmentation fault (core dumped)\n")
    died = worker_death("The actor died unexpectedly.\n\tpid: 7", str(log), WorkerExit(-11))
    assert headline(died) == "trial worker died: killed by signal 11 (SIGSEGV)"
    exited = worker_death("The actor died unexpectedly.", str(log), WorkerExit(0))
    assert headline(exited) == f"trial worker died: exit code 0 ({EXITED_FIX})"
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in train\n'
        "    raise ValueError('bad width')\n"
        "ValueError: bad width\n"
    )
    assert headline(traceback) == "ValueError: bad width"
    # A user's multi-line error that happens to begin with one of hpsearch's words.
    assert headline("hungry for data\nValueError: empty loader") == "ValueError: empty loader"
    assert headline("the objective metric 'acc' is nan") == "the objective metric 'acc' is nan"
    assert headline(" \n") == "unknown error"


def test_a_worker_that_never_started_says_where_to_look(tmp_path: Path) -> None:
    crash = (
        "The actor is not schedulable: Could not create the actor because worker startup "
        "repeatedly failed."
    )
    text = worker_death(crash, str(tmp_path / "none"))
    assert text == f"trial worker died: {crash}; {NEVER_STARTED_FIX}"
    assert "python -c 'import ray' in the folder hpsearch ran in" in text


def test_a_progress_bar_in_a_dead_workers_stderr_is_its_last_drawing(tmp_path: Path) -> None:
    # tqdm redraws its bar with carriage returns: 500 drawings, one line on a terminal.
    log = tmp_path / "trial-1.stderr"
    bar = "".join(f"\rEpoch 0: {i // 5:3d}%| {i}/500 [loss={1 / (i + 1):.4f}]" for i in range(500))
    log.write_text("loading data\n" + bar)

    text = worker_death("the actor died", str(log))

    assert text.splitlines()[1:] == [
        "last 2 line(s) of its stderr:",
        "loading data",
        "Epoch 0:  99%| 499/500 [loss=0.0020]",
    ]


@pytest.mark.process
@pytest.mark.parametrize(
    ("code", "ends", "described"),
    [
        ("os._exit(3)", 3, "exit code 3"),
        ("os.kill(os.getpid(), 9)", -signal.SIGKILL, "killed by signal 9 (SIGKILL)"),
        ("import ctypes; ctypes.string_at(0)", -signal.SIGSEGV, "killed by signal 11 (SIGSEGV)"),
    ],
)
def test_the_reaper_learns_how_its_worker_ended_and_ends_the_same_way(
    tmp_path: Path, code: str, ends: int, described: str
) -> None:
    # As Ray starts a worker with a py_executable: the prefix, then the worker's arguments.
    command = [
        *shlex.split(reaper_command(tmp_path)),
        "-c",
        f"import os; print(os.getpid()); {code}",
    ]
    reaper = subprocess.run(command, capture_output=True, text=True, check=False, timeout=30)

    assert reaper.returncode == ends  # Ray sees the worker's own death
    pid = int(reaper.stdout.split()[0])
    ended = worker_exit(str(tmp_path), pid, wait_s=0)
    assert ended == WorkerExit(ends)
    assert ended.describe() == described
    text = worker_death("the actor died", "", ended)
    assert text == f"trial worker died: {described}\nRay: the actor died"


def test_no_reaper_no_exit_and_no_wait(tmp_path: Path) -> None:
    waits: list[float] = []
    assert worker_exit(str(tmp_path), 123, sleep=waits.append) is None  # no exits folder
    assert worker_exit("", 123) is None
    assert worker_exit(str(tmp_path), None) is None
    (tmp_path / "exits").mkdir()
    assert worker_exit(str(tmp_path), 123, wait_s=0.3, sleep=waits.append) is None
    assert len(waits) == 3  # it waited for the reaper, then gave up


def test_the_driver_waits_for_a_reaper_that_writes_after_ray_reports_the_death(
    tmp_path: Path,
) -> None:
    reaper_command(tmp_path)  # a Ray started with reapers: their folder is there at once
    late = tmp_path / "exits" / "321.exit"

    def sleep(seconds: float) -> None:
        late.write_text("-9")  # the reaper writes while the driver waits

    assert worker_exit(str(tmp_path), 321, sleep=sleep) == WorkerExit(-9)
