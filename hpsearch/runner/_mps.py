"""NVIDIA MPS for a search: a control daemon per GPU of this machine, started when it is shared.

Processes that share a GPU by time-slicing run one kernel at a time; under MPS
their kernels run side by side (on an H200, eight processes of small kernels
did 5.06x the work time-sliced; GPU-filling ones gained nothing). With
``packing.mps: auto`` (the default), :class:`MpsDaemons` starts a control
daemon for a GPU of the driver's machine the first time the packing policy lets
it hold more than one trial: one daemon per GPU (``CUDA_VISIBLE_DEVICES`` set
to it), its pipe folder under the search's scratch folder, quit when the search
ends. A trial's worker looks for its GPU's pipe before CUDA starts in it
(:func:`use_mps`) and runs as an MPS client where there is one; a worker that
started CUDA before the daemon stays time-sliced, so both kinds run side by
side on the GPU and their steps say whether MPS paid (the packing policy's
judge).

Not started, with one line saying why, and packing goes on time-sliced: where
no NVIDIA GPU is read (simulated GPUs), on a Ray cluster (MPS is each node's
own: start it there before ``ray start``), where ``nvidia-cuda-mps-control`` is
not installed or fails to start, and where the user runs a daemon already
(``CUDA_MPS_PIPE_DIRECTORY`` set, or one on the default pipe): the trials use
that one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hpsearch.telemetry import MPS_ENV, cuda_device, names_mig, user_daemon

CONTROL = "nvidia-cuda-mps-control"
MPS_FOLDER = "mps"
"""The per-GPU pipe folders' parent, in the search's scratch folder (short: a socket path)."""


@dataclass(frozen=True)
class MpsState:
    """Whether MPS served a GPU of the search, and what happened (for the parent run's tag)."""

    active: bool
    detail: str


def gpu_pipe(folder: Path, index: int) -> Path:
    """The pipe folder of GPU ``index``'s daemon under ``folder``."""
    return folder / MPS_FOLDER / f"gpu{index}" / "pipe"


class MpsDaemons:
    """The search's MPS daemons, one per shared GPU of the driver's machine.

    Args:
        mode: ``packing.mps`` (``auto`` or ``off``).
        folder: the search's scratch folder (its workers look there, see :func:`use_mps`).
        real_gpus: NVIDIA GPUs are read here (not simulated, not none).
        cluster: the search joins a Ray cluster (MPS is each node's own).
        say: where a line about MPS goes (the progress view).
        control: the control program (a test passes a stand-in).
        environ: the environment a user daemon is looked for in (default: this process's).
    """

    def __init__(
        self,
        mode: str,
        *,
        folder: Path,
        real_gpus: bool,
        cluster: bool,
        say: Callable[[str], None],
        control: str = CONTROL,
        environ: dict[str, str] | None = None,
    ) -> None:
        self._mode = mode
        self._folder = folder
        self._real_gpus = real_gpus
        self._cluster = cluster
        self._say = say
        self._control = control
        self._environ = dict(os.environ if environ is None else environ)
        self._lock = threading.Lock()
        self.states: dict[int, MpsState] = {}
        """Each GPU shared so far: whether MPS serves it, and why (not)."""

    def shared(self, index: int) -> None:
        """GPU ``index`` of this machine may now hold more than one trial: MPS, where it can."""
        with self._lock:
            if index in self.states:
                return
            state = self._start(index)
            self.states[index] = state
        if self._mode == "auto":
            self._say(f"MPS on gpu{index}: {state.detail}")

    def detail(self) -> str:
        """What happened, per GPU, for the parent run's tag."""
        if self._mode != "auto":
            return "off (packing.mps)"
        if not self.states:
            return "not started: no GPU held more than one trial"
        return "; ".join(f"gpu{i}: {s.detail}" for i, s in sorted(self.states.items()))

    def close(self) -> None:
        """Quit the daemons this search started (a daemon already gone is let be)."""
        with self._lock:
            started = [i for i, s in self.states.items() if s.active]
            self.states = {i: MpsState(False, s.detail) for i, s in self.states.items()}
        binary = shutil.which(self._control)
        for index in started:
            if binary is not None:
                _control(binary, [], self._env(index), stdin="quit\n")
            shutil.rmtree(gpu_pipe(self._folder, index).parent, ignore_errors=True)

    def _start(self, index: int) -> MpsState:
        why_not = self._why_not()
        if why_not is not None:
            return MpsState(False, why_not)
        theirs = user_daemon(self._environ)
        if theirs:
            return MpsState(True, f"the daemon already running on {theirs} serves the trials")
        binary = shutil.which(self._control)
        if binary is None:
            return MpsState(False, f"not started: {self._control} is not installed; time-sliced")
        env = self._env(index)
        for name in MPS_ENV:
            Path(env[name]).mkdir(parents=True, exist_ok=True)
        started = _control(binary, ["-d"], env)
        if started.returncode != 0:
            why = (started.stderr or started.stdout).strip().splitlines() or ["no message"]
            return MpsState(
                False, f"not started: {Path(self._control).name} -d failed ({why[-1]}); time-sliced"
            )
        return MpsState(True, f"active (a control daemon on {env[MPS_ENV[0]]})")

    def _why_not(self) -> str | None:
        """Why this search starts no daemon whatever the GPU (``None``: it may)."""
        if self._mode != "auto":
            return "off (packing.mps)"
        if not self._real_gpus:
            return "not started: no NVIDIA GPU is read here; time-sliced"
        if self._cluster:
            return (
                "not started: the search runs on a Ray cluster; start MPS on each node "
                "(nvidia-cuda-mps-control -d) before ray start; time-sliced"
            )
        if names_mig(self._environ.get("CUDA_VISIBLE_DEVICES")):
            return (
                "not started: the GPUs are MIG instances (CUDA_VISIBLE_DEVICES), each its "
                "own daemon's (start one per instance before hpsearch run); time-sliced"
            )
        return None

    def _env(self, index: int) -> dict[str, str]:
        pipe = gpu_pipe(self._folder, index)
        return {
            # By UUID, as the trial's worker names it (use_gpu): a daemon started on
            # CUDA_VISIBLE_DEVICES=1 shows its clients that GPU as device 0, and a client
            # asking for device 1 would find none.
            "CUDA_VISIBLE_DEVICES": cuda_device(index),
            MPS_ENV[0]: str(pipe),
            MPS_ENV[1]: str(pipe.parent / "log"),
        }


def use_mps(folder: str, index: int) -> bool:
    """In a trial's worker, before CUDA starts: be a client of GPU ``index``'s daemon.

    Where the search's daemon for the GPU runs (its pipe under ``folder``) and CUDA
    has not started in this process, the worker points CUDA at it. A worker whose
    CUDA started earlier keeps what it started with.

    Returns:
        Whether this worker's CUDA goes (or went) through an MPS daemon.
    """
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return bool(os.environ.get(MPS_ENV[0]))
    if not folder:
        return bool(os.environ.get(MPS_ENV[0]))
    pipe = gpu_pipe(Path(folder), index)
    if not (pipe / "control").exists():
        return bool(os.environ.get(MPS_ENV[0]))
    os.environ[MPS_ENV[0]] = str(pipe)
    os.environ[MPS_ENV[1]] = str(pipe.parent / "log")
    return True


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
