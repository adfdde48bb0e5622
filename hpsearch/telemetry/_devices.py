"""How CUDA reaches this machine's GPUs: which GPU a ``CUDA_VISIBLE_DEVICES`` entry
names, in NVML's numbering, and whether a user's MPS daemon serves them.

The monitor and the packing policy number GPUs as NVML does (by PCI bus); CUDA
numbers them fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and under an
MPS daemon started for one GPU a client sees that GPU as its device 0. A GPU's
UUID names it the same way in all three, so a trial is pointed at the GPU the
policy chose by its UUID (:func:`cuda_device`), as NVIDIA's MPS guide advises,
and a user's ``CUDA_VISIBLE_DEVICES`` given as UUIDs is read back to NVML's
numbers (:func:`visible_gpus`). A MIG instance (``MIG-...``) is a slice of a GPU
that the policy's numbers cannot name: a worker Ray gave one keeps it
(:func:`names_mig`). A daemon the user runs (:func:`user_daemon`) serves every
CUDA process of the machine that finds its pipe, so a GPU whose compute mode
admits one process at a time takes several trials through it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")
"""Present where an NVIDIA driver is loaded (Linux)."""
MPS_ENV = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")
"""What CUDA clients read to find an MPS daemon (the user's: passed on to the trial workers)."""
DEFAULT_PIPE = Path("/tmp/nvidia-mps")
"""Where an MPS daemon started without a pipe folder listens (and its clients look)."""


def gpu_uuids(nvml: Any | None = None) -> tuple[str, ...]:
    """The UUID of each GPU NVML numbers on this machine, in its order (empty: NVML does
    not answer here).

    Args:
        nvml: the NVML binding; the installed ``pynvml`` by default (tests pass a fake).
    """
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return ()
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return ()
    try:
        count = nvml.nvmlDeviceGetCount()
        return tuple(
            _text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)
        )
    except nvml.NVMLError:
        return ()
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


@functools.cache
def local_gpu_uuids() -> tuple[str, ...]:
    """This machine's :func:`gpu_uuids`, read once per process (none on a Linux machine
    without an NVIDIA driver: logical GPUs, as in CI, import no NVML)."""
    if sys.platform.startswith("linux") and not NVIDIA_DRIVER.exists():
        return ()
    return gpu_uuids()


def cuda_device(index: int, uuids: Sequence[str] | None = None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry for NVML's GPU ``index``: its UUID, or the index
    where the UUID is not known.

    Args:
        uuids: the machine's GPUs' UUIDs in NVML's order (default: :func:`local_gpu_uuids`).
    """
    known = local_gpu_uuids() if uuids is None else uuids
    return known[index] if 0 <= index < len(known) else str(index)


def visible_gpus(
    value: str | None, uuids: Callable[[], Sequence[str]] | None = None
) -> list[int] | None:
    """NVML's numbers of the GPUs ``CUDA_VISIBLE_DEVICES`` (``value``) leaves visible
    (``None``: all of them, or entries that name no whole GPU NVML knows).

    Entries are indices or GPU UUIDs, a UUID's first characters enough where they name
    one GPU (as CUDA reads them). ``uuids`` (default: :func:`local_gpu_uuids`) is asked
    only where an entry is a UUID.
    """
    if value is None or not value.strip():
        return None
    entries = [entry.strip() for entry in value.split(",")]
    if all(entry.isdigit() for entry in entries):
        return [int(entry) for entry in entries]
    known = list((uuids or local_gpu_uuids)())
    indices = []
    for entry in entries:
        if entry.isdigit():
            indices.append(int(entry))
            continue
        matches = [i for i, uuid in enumerate(known) if uuid.startswith(entry)]
        if not entry.startswith("GPU-") or len(matches) != 1:
            return None  # a MIG instance, a UUID not found, or one of several
        indices.append(matches[0])
    return indices


def names_mig(value: str | None) -> bool:
    """Whether ``CUDA_VISIBLE_DEVICES`` (``value``) names a MIG instance."""
    return value is not None and any(entry.strip().startswith("MIG-") for entry in value.split(","))


def user_daemon(environ: dict[str, str] | None = None) -> str:
    """Where an MPS daemon the user runs listens ("": none found), by ``environ`` (default:
    this process's) and the default pipe folder."""
    env = os.environ if environ is None else environ
    if env.get(MPS_ENV[0]):
        return env[MPS_ENV[0]]
    return str(DEFAULT_PIPE) if (DEFAULT_PIPE / "control").exists() else ""


def _text(value: str | bytes) -> str:
    # nvidia-ml-py before 11.515 answers bytes.
    return value.decode() if isinstance(value, bytes) else value
