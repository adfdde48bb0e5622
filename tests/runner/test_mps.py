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

from hpsearch.runner import MpsDaemons, gpu_pipe, use_mps
from hpsearch.telemetry import MPS_ENV
from hpsearch.trial.protocol import Assignment
from hpsearch.worker import use_gpu


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
def test_a_daemon_is_started_on_its_gpus_uuid_which_its_clients_name_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Started on CUDA_VISIBLE_DEVICES=1, a daemon shows its clients GPU 1 as device 0, so
    # a worker placed on GPU 1 (CUDA_VISIBLE_DEVICES=1) found no device under it. By the
    # GPU's UUID (a fake NVML's: no GPU here), both name the same GPU.
    uuids = ("GPU-8932f937-d72c", "GPU-5c1b3d27-0e3b")
    monkeypatch.setattr("hpsearch.telemetry._devices.local_gpu_uuids", lambda: uuids)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # Ray's choice for the worker, put back after
    daemons, _ = _daemons(tmp_path, _control(tmp_path))

    daemons.shared(1)
    daemons.close()

    pipe = gpu_pipe(tmp_path / "scratch", 1)
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls[:2] == [f"args=-d gpu={uuids[1]} pipe={pipe}", f"args= gpu={uuids[1]} pipe={pipe}"]
    assert use_gpu(1, Assignment(cpus=1.0, gpu_ids=("0",))).gpu_ids == ("1",)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == uuids[1]


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
        (
            {"environ": {"CUDA_VISIBLE_DEVICES": "MIG-4f6e5a2b-9c1d-5e3f-8a7b-6c5d4e3f2a1b"}},
            "the GPUs are MIG instances (CUDA_VISIBLE_DEVICES), each its own daemon's",
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
