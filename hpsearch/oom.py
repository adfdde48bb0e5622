"""Out-of-memory: recognising it, and predicting it from configurations that already ran out.

Pure: the predicates read exceptions and error texts, the predictor compares
parameter sets. The trial worker and the driver's recorder act on them.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_DEVICE_OOM_TEXT = re.compile(r"\b(CUDA|HIP) out of memory\b", re.IGNORECASE)
_LIBRARY_ALLOC_TEXT = re.compile(
    r"CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|CUDNN_STATUS_NOT_ENOUGH_MEMORY"
    r"|cuFFT error: CUFFT_ALLOC_FAILED|CUSOLVER_STATUS_ALLOC_FAILED"
)
_RAY_HOST_OOM_TEXT = re.compile(
    r"OutOfMemoryError|running low on memory|killed by the OOM killer|oom[-_ ]kill"
    r"|Out of memory: Killed process",
    re.IGNORECASE,
)
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


def cgroup_oom_kills(path: Path = Path("/sys/fs/cgroup/memory.events")) -> int | None:
    """The kernel's OOM-kill count for this machine's cgroup (v2); ``None`` where unreadable."""
    try:
        for line in path.read_text(encoding="ascii").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        return None
    return None


@dataclass(frozen=True)
class OomCase:
    """A configuration that ran out of memory, as the predictor keeps it."""

    number: int
    params: Mapping[str, Any]
    memory_cap_mb: float | None = None


class OomPredictor:
    """Predicts out-of-memory for a suggestion from configurations that already ran out.

    A suggestion is predicted to run out when, compared with one that did under a
    cap no larger than the suggestion would get, every parameter is equal except
    those the config marks as growing memory, which are greater or equal (numbers
    only). Such a suggestion needs at least as much memory, so it is not launched.

    Args:
        grows_memory: parameter names whose larger values need more memory
            (e.g. ``batch_size``, ``width``, ``seq_len``).
        memory_neutral: parameter names that do not change memory (e.g. ``lr``);
            they are not compared.
    """

    def __init__(self, grows_memory: Sequence[str], memory_neutral: Sequence[str] = ()) -> None:
        self._grows = frozenset(grows_memory)
        self._neutral = frozenset(memory_neutral)
        self._cases: list[OomCase] = []

    @property
    def cases(self) -> list[OomCase]:
        """The configurations known to run out of memory."""
        return list(self._cases)

    def add(self, case: OomCase) -> None:
        """Remember a configuration that ran out of memory (judged infeasible)."""
        self._cases.append(case)

    def predict(
        self, params: Mapping[str, Any], memory_cap_mb: float | None = None
    ) -> OomCase | None:
        """The known OOM case that ``params`` needs at least as much memory as, if any."""
        for case in self._cases:
            if _cap_no_larger(case.memory_cap_mb, memory_cap_mb) and self._at_least(
                params, case.params
            ):
                return case
        return None

    def _at_least(self, params: Mapping[str, Any], known: Mapping[str, Any]) -> bool:
        return needs_at_least(params, known, self._grows, self._neutral)


class MeasuredConfigs:
    """Configurations seen running past their warm-up, to tell a new kind of trial from a known one.

    A suggestion is of a known kind when some measured configuration has values
    at least as large for every parameter that grows memory (``oom.grows_memory``;
    the others are not compared: a learning rate does not make a new kind).
    Otherwise it is larger than anything measured, and the packing policy gives
    its GPU no new neighbours until it has been measured too.
    """

    def __init__(self, grows_memory: Sequence[str]) -> None:
        self._grows = tuple(grows_memory)
        self._known: list[dict[str, Any]] = []

    def add(self, params: Mapping[str, Any]) -> None:
        """A configuration ran past its warm-up."""
        if not self.covers(params):
            self._known.append({n: params[n] for n in self._grows if n in params})

    def covers(self, params: Mapping[str, Any]) -> bool:
        """Whether a measured configuration is at least as large as ``params`` in memory."""
        mine = {n: params[n] for n in self._grows if n in params}
        return any(
            needs_at_least(known, mine, frozenset(self._grows), frozenset())
            for known in self._known
        )


def needs_at_least(
    params: Mapping[str, Any],
    known: Mapping[str, Any],
    grows_memory: frozenset[str],
    memory_neutral: frozenset[str],
) -> bool:
    """Whether ``params`` needs at least the memory of ``known``.

    The same parameters; equal values except those that grow memory (greater or
    equal, numbers only) and those that are memory-neutral (not compared).
    """
    if set(params) != set(known):
        return False
    for name, value in params.items():
        if name in memory_neutral:
            continue
        other = known[name]
        if name in grows_memory and _is_number(value) and _is_number(other):
            if value < other:
                return False
        elif value != other:
            return False
    return True


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _cap_no_larger(known: float | None, candidate: float | None) -> bool:
    """Whether the known case's cap was at least as generous as the candidate's will be."""
    if known is None:  # ran out with the whole GPU
        return True
    return candidate is not None and candidate <= known
