"""NVIDIA MPS for one search: started where the config allows it and it is installed, stopped after.

Processes that share a GPU by time-slicing often gain less than the idle share
promises; under MPS their kernels run side by side. hpsearch never needs MPS:
``packing.mps: auto`` starts a control daemon of its own (its own pipe folder,
so a daemon the user runs is left alone) before Ray starts, points the trial
workers at it, and quits it when the search ends. Whether it was active, and
why not, is recorded on the parent run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CONTROL = "nvidia-cuda-mps-control"
MPS_ENV = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")
"""What CUDA clients read to find the daemon; the runner passes them to the trial workers."""


@dataclass(frozen=True)
class MpsState:
    """Whether MPS ran for the search, and what happened (for the parent run's tag)."""

    active: bool
    detail: str


@contextmanager
def mps_daemon(
    mode: str, *, real_gpus: bool, cluster: bool, control: str = CONTROL
) -> Iterator[MpsState]:
    """Run an MPS control daemon for the duration of the ``with`` block, where it applies.

    Args:
        mode: ``packing.mps`` (``auto`` or ``off``).
        real_gpus: NVIDIA GPUs are read here (not simulated, not none).
        cluster: the search joins a Ray cluster (MPS would cover this machine only).
        control: the control program (a test passes a stand-in).
    """
    if mode != "auto":
        yield MpsState(False, "off (packing.mps)")
        return
    if not real_gpus:
        yield MpsState(False, "not started: no NVIDIA GPU is read here")
        return
    if cluster:
        yield MpsState(
            False,
            "not started: the search runs on a Ray cluster; start MPS on each node "
            "(nvidia-cuda-mps-control -d) before ray start",
        )
        return
    binary = shutil.which(control)
    if binary is None:
        yield MpsState(False, f"not started: {control} is not installed")
        return
    with tempfile.TemporaryDirectory(prefix="hpsearch-mps-") as folder:
        env = {MPS_ENV[0]: str(Path(folder) / "pipe"), MPS_ENV[1]: str(Path(folder) / "log")}
        for path in env.values():
            Path(path).mkdir()
        started = _control(binary, ["-d"], env)
        if started.returncode != 0:
            why = (started.stderr or started.stdout).strip().splitlines() or ["no message"]
            yield MpsState(False, f"not started: {Path(control).name} -d failed ({why[-1]})")
            return
        saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        try:
            yield MpsState(True, f"active (control daemon with pipe folder {env[MPS_ENV[0]]})")
        finally:
            _control(binary, [], env, stdin="quit\n")
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def _control(
    binary: str, args: list[str], env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [binary, *args],
            input=stdin,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess([binary, *args], 1, "", str(exc))
