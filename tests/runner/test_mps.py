"""MPS for a search's shared GPUs: a stand-in control program plays NVIDIA's (no GPU here).

The stand-in records how it was called; started with ``-d`` it leaves a real process
behind, as the daemon does, listening on nothing but holding its pipe folder's
``control`` file, so a test can kill it mid-search.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import time
from pathlib import Path

import pytest

from hpsearch.runner import MPS_ENV, MpsDaemons, gpu_pipe, use_mps


def _control(folder: Path, *, exit_code: int = 0) -> Path:
    """A stand-in ``nvidia-cuda-mps-control``: ``-d`` starts a daemon process (it writes
    its pid and a ``control`` file in the pipe folder); no argument reads commands."""
    script = folder / "nvidia-cuda-mps-control"
    log = folder / "calls.log"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "args=$* gpu=$CUDA_VISIBLE_DEVICES pipe=$CUDA_MPS_PIPE_DIRECTORY" >> {log}\n'
        f"if [ {exit_code} -ne 0 ]; then "
        f'echo "An instance of this daemon is already running" >&2; exit {exit_code}; fi\n'
        'if [ "$1" = "-d" ]; then\n'
        '  (trap "" HUP; exec sleep 300) > /dev/null 2>&1 &\n'
        '  echo $! > "$CUDA_MPS_PIPE_DIRECTORY/daemon.pid"\n'
        '  touch "$CUDA_MPS_PIPE_DIRECTORY/control"\n'
        "  exit 0\n"
        "fi\n"
        f"cat >> {log}\n"
        'if [ -f "$CUDA_MPS_PIPE_DIRECTORY/daemon.pid" ]; then\n'
        '  kill "$(cat "$CUDA_MPS_PIPE_DIRECTORY/daemon.pid")" 2> /dev/null || true\n'
        "fi\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _daemons(tmp_path: Path, control: Path | str, **kwargs: object) -> tuple[MpsDaemons, list[str]]:
    said: list[str] = []
    options: dict[str, object] = {"real_gpus": True, "cluster": False, "environ": {}}
    options.update(kwargs)
    daemons = MpsDaemons(
        "auto",
        folder=tmp_path / "scratch",
        say=said.append,
        control=str(control),
        **options,  # type: ignore[arg-type]
    )
    return daemons, said


@pytest.mark.process
def test_a_daemon_starts_per_gpu_the_first_time_it_is_shared_and_quits_at_the_end(
    tmp_path: Path,
) -> None:
    daemons, said = _daemons(tmp_path, _control(tmp_path))

    daemons.shared(1)
    daemons.shared(1)  # once per GPU

    pipe = gpu_pipe(tmp_path / "scratch", 1)
    assert (pipe / "control").exists()
    assert said == [f"MPS on gpu1: active (a control daemon on {pipe})"]
    assert daemons.detail() == f"gpu1: active (a control daemon on {pipe})"
    pid = int((pipe / "daemon.pid").read_text())
    daemons.close()
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls == [f"args=-d gpu=1 pipe={pipe}", f"args= gpu=1 pipe={pipe}", "quit"]
    _gone(pid)
    assert not pipe.exists()


@pytest.mark.process
def test_a_daemon_killed_mid_search_is_let_be_at_the_end(tmp_path: Path) -> None:
    daemons, _ = _daemons(tmp_path, _control(tmp_path))
    daemons.shared(0)
    pid = int((gpu_pipe(tmp_path / "scratch", 0) / "daemon.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    _gone(pid)

    daemons.close()  # quit to a daemon that is gone: no hang, no error

    assert not gpu_pipe(tmp_path / "scratch", 0).exists()


@pytest.mark.process
def test_a_daemon_that_fails_to_start_leaves_the_gpu_time_sliced_with_one_line(
    tmp_path: Path,
) -> None:
    daemons, said = _daemons(tmp_path, _control(tmp_path, exit_code=1))
    daemons.shared(0)
    assert said == [
        "MPS on gpu0: not started: nvidia-cuda-mps-control -d failed "
        "(An instance of this daemon is already running); time-sliced"
    ]
    assert not (gpu_pipe(tmp_path / "scratch", 0) / "control").exists()
    daemons.close()


@pytest.mark.parametrize(
    ("options", "detail"),
    [
        ({"real_gpus": False}, "no NVIDIA GPU is read here; time-sliced"),
        ({"cluster": True}, "runs on a Ray cluster"),
        ({"control": "no-such-mps-control"}, "no-such-mps-control is not installed"),
        (
            {"environ": {"CUDA_MPS_PIPE_DIRECTORY": "/srv/mps"}},
            "the daemon already running on /srv/mps serves the trials",
        ),
    ],
)
def test_where_no_daemon_is_started_the_line_says_why(
    tmp_path: Path, options: dict[str, object], detail: str
) -> None:
    control = options.pop("control", "nvidia-cuda-mps-control")
    daemons, said = _daemons(tmp_path, str(control), **options)
    daemons.shared(0)
    assert detail in said[0]
    assert detail in daemons.detail()
    daemons.close()


def test_a_worker_becomes_a_client_of_its_gpus_daemon_before_cuda_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in MPS_ENV:
        monkeypatch.delenv(name, raising=False)
    assert not use_mps(str(tmp_path), 0)  # no daemon for GPU 0: time-sliced
    assert MPS_ENV[0] not in os.environ
    pipe = gpu_pipe(tmp_path, 0)
    pipe.mkdir(parents=True)
    (pipe / "control").touch()

    assert use_mps(str(tmp_path), 0)

    assert os.environ[MPS_ENV[0]] == str(pipe)
    assert os.environ[MPS_ENV[1]] == str(pipe.parent / "log")


def _gone(pid: int, wait_s: float = 5.0) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):  # not a child of this process
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still runs")
