"""A worker that dies hard leaves its stderr: captured while the trial runs, read at its death."""

from __future__ import annotations

import os
from pathlib import Path

from hpsearch.trial.death import TAIL_LINES, captured_stderr, stderr_file, worker_death


def test_stderr_written_by_any_code_goes_to_the_trials_file_while_it_runs(
    tmp_path: Path,
) -> None:
    path = stderr_file(str(tmp_path), 7)
    assert path.endswith("trial-7.stderr")
    with captured_stderr(path):
        os.write(2, b"from C, on fd 2\n")
    os.write(2, b"")  # fd 2 is the test's own again
    assert Path(path).read_text() == "from C, on fd 2\n"
    assert stderr_file("", 7) == ""


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
