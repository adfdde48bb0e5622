"""Predicting out-of-memory from configurations that already ran out, and telling new kinds.

Pure: both compare parameter sets along the parameters the config marks as
growing memory (``oom.grows_memory``) and those it marks neutral.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hpsearch.oom._base import OomCase


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


class MemoryNeeds:
    """What a configuration needs at least, learnt from what ran: peaks, and caps too small.

    A suggestion needs at least the memory of every configuration it is at least
    as large as (along ``oom.grows_memory``, the neutral parameters ignored):
    the peak that configuration was measured at, or more than the cap it ran out
    under. The packing policy uses it to give a trial a whole GPU before it runs
    out under a share.
    """

    def __init__(self, grows_memory: Sequence[str], memory_neutral: Sequence[str] = ()) -> None:
        self._grows = frozenset(grows_memory)
        self._neutral = frozenset(memory_neutral)
        # (params, MiB, trial number, whether it needs more than that rather than that)
        self._known: list[tuple[dict[str, Any], float, int, bool]] = []

    def ran(self, number: int, params: Mapping[str, Any], peak_mb: float) -> None:
        """Trial ``number`` ran with these parameters and held ``peak_mb`` at most.

        No parameters known at launch (an Optuna objective suggests them in its worker)
        say nothing about the next trial's configuration: nothing is learnt.
        """
        if params:
            self._known.append((dict(params), peak_mb, number, False))

    def ran_out(self, number: int, params: Mapping[str, Any], cap_mb: float) -> None:
        """Trial ``number`` ran out of memory under a cap of ``cap_mb``: it needs more."""
        self._known.append((dict(params), cap_mb, number, True))

    def beyond(self, params: Mapping[str, Any], cap_mb: float) -> tuple[float, int] | None:
        """The memory ``params`` is known to need past ``cap_mb``, and the trial that says so."""
        found = [
            (need, number)
            for known, need, number, more in self._known
            if (need > cap_mb or (more and need >= cap_mb))
            and needs_at_least(params, known, self._grows, self._neutral)
        ]
        return max(found) if found else None
