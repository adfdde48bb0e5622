"""Recognising out-of-memory: small predicates over exceptions, crash texts and the kernel's count.

Pure but for :func:`cgroup_oom_kills`, which reads one file. The trial worker
asks :func:`device_oom` about an exception; the driver asks
:func:`host_oom_evidence` about a worker that died.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

_DEVICE_OOM_TEXT = re.compile(r"\b(CUDA|HIP) out of memory\b", re.IGNORECASE)
_LIBRARY_ALLOC_TEXT = re.compile(
    r"CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|CUDNN_STATUS_NOT_ENOUGH_MEMORY"
    r"|cuFFT error: CUFFT_ALLOC_FAILED|CUSOLVER_STATUS_ALLOC_FAILED"
)
# Ray's memory monitor's own words. Not "killed by the OOM killer": Ray lists that
# among the possible causes of every worker that dies without a word.
_RAY_HOST_OOM_TEXT = re.compile(r"OutOfMemoryError|running low on memory", re.IGNORECASE)
_SIGKILL_TEXT = re.compile(r"SIGKILL|exit code -?9\b|exit code 137\b|signal 9\b")


def is_torch_oom(exc: BaseException) -> bool:
    """``torch.cuda.OutOfMemoryError`` (and its subclasses)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(exc, torch.cuda.OutOfMemoryError)


def is_device_oom_message(exc: BaseException) -> bool:
    """A RuntimeError whose message says CUDA or HIP ran out of memory."""
    return isinstance(exc, RuntimeError) and bool(_DEVICE_OOM_TEXT.search(str(exc)))


def is_library_alloc_failure(exc: BaseException) -> bool:
    """cuBLAS, cuDNN, cuFFT or cuSOLVER failing to allocate its workspace."""
    return isinstance(exc, RuntimeError) and bool(_LIBRARY_ALLOC_TEXT.search(str(exc)))


def device_oom(exc: BaseException) -> str | None:
    """Which kind of device out-of-memory ``exc`` is, or ``None``.

    Follows the exception's cause and context, since user code often re-raises.
    Returns ``"torch"``, ``"message"`` or ``"library"``.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if is_torch_oom(current):
            return "torch"
        if is_device_oom_message(current):
            return "message"
        if is_library_alloc_failure(current):
            return "library"
        current = current.__cause__ or current.__context__
    return None


def host_oom_evidence(crash: str, oom_kills_before: int | None, oom_kills_now: int | None) -> str:
    """Why a dead trial worker is judged killed for host memory; empty when it is not.

    Evidence is Ray's out-of-memory error in the crash text, or a SIGKILL while
    the kernel's OOM-kill counter of this machine's cgroup went up.
    """
    found = _RAY_HOST_OOM_TEXT.search(crash)
    if found:
        return f"Ray reported host memory exhaustion ({found.group(0)})"
    if (
        _SIGKILL_TEXT.search(crash)
        and oom_kills_before is not None
        and oom_kills_now is not None
        and oom_kills_now > oom_kills_before
    ):
        return (
            f"worker killed by SIGKILL while the kernel OOM killer acted "
            f"({oom_kills_now - oom_kills_before} kill(s) in this cgroup)"
        )
    return ""


CGROUP_OOM_FILES = (
    Path("/sys/fs/cgroup/memory.events"),  # cgroup v2
    Path("/sys/fs/cgroup/memory/memory.oom_control"),  # cgroup v1's memory controller
)
"""Where the kernel counts the OOM kills of this machine's (or container's) cgroup."""


def cgroup_oom_kills(paths: Sequence[Path] = CGROUP_OOM_FILES) -> int | None:
    """The kernel's OOM-kill count for this machine's cgroup; ``None`` where unreadable.

    The first of ``paths`` that holds an ``oom_kill`` line (cgroup v2's
    ``memory.events``, else v1's ``memory.oom_control``).
    """
    for path in paths:
        try:
            for line in path.read_text(encoding="ascii").splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None
