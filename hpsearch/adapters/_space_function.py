"""A define-by-run space function as hpsearch's ``space``: ``space: mymod:define_by_run``.

Ray Tune's ``OptunaSearch(space=fn)`` takes a function of an Optuna trial that calls
``trial.suggest_*`` (branching on what it chose) and returns ``None`` or a dict of
constants; Ray's own ``optuna_define_by_run_example.py`` is one. hpsearch's ``space``
is written out before any trial, so :func:`traced` reads such a function by running
it with a recording trial down every branch of its choices (a categorical, or an int
of a few values): each parameter it suggests becomes an entry, with ``when`` naming
the choices under which it is suggested, and what it returns becomes constants. The
study then suggests the same parameters under the same conditions, define-by-run.

What a space cannot say is refused with the fix, never searched otherwise: a branch
on the value of a range (``if lr > 0.01``), a parameter suggested with other bounds
in other branches, constants that differ between branches, or more than
:data:`MAX_BRANCHES` branches.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_BRANCHES = 4096
"""The most branches a traced function may have (each is run twice: a function that only
suggests takes microseconds; four independent choices of eight values are 4,096)."""

SMALL_INT = 8
"""An int of at most this many values is a choice a function may branch on (Optuna's
``n_layers = trial.suggest_int("n_layers", 1, 3)``, then a parameter per layer)."""


class SpaceFunctionError(ValueError):
    """A define-by-run space function that no ``space`` says, with the fix."""


@dataclass
class _Path:
    """One run of the function: what it suggested, in order, and what it returned."""

    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    chosen: dict[str, Any] = field(default_factory=dict)
    decisions: list[tuple[str, list[Any]]] = field(default_factory=list)
    constants: dict[str, Any] = field(default_factory=dict)


class _RecordingTrial:
    """What a space function sees of an Optuna trial: ``suggest_*`` answered from ``forced``
    (a branch's choices), else the first choice, and every range at its ``end`` (``low``
    or ``high``), each suggestion recorded."""

    number = 0

    def __init__(self, target: str, forced: Mapping[str, Any], end: str) -> None:
        self._target = target
        self._forced = forced
        self._end = end
        self.path = _Path()

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.path.chosen)

    @property
    def user_attrs(self) -> dict[str, Any]:
        return {}

    def set_user_attr(self, key: str, value: Any) -> None:
        """Kept nowhere: a space function's attrs say nothing of a trial."""

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        options = list(choices)
        odd = [c for c in options if c is not None and not isinstance(c, bool | int | float | str)]
        if odd:
            raise SpaceFunctionError(
                f"'{self._target}' suggests '{name}' among {type(odd[0]).__name__} values "
                f"({odd[0]!r:.40}); a space's choices are numbers, strings, booleans or None: "
                "choose among names and look the value up in the trainable"
            )
        return self._decide(name, {"type": "categorical", "choices": options}, options)

    def suggest_float(
        self,
        name: str,
        low: float,
        high: float,
        *,
        step: float | None = None,
        log: bool = False,
    ) -> float:
        entry: dict[str, Any] = {"type": "float", "low": float(low), "high": float(high)}
        entry.update({"log": True} if log else {}, **({"step": step} if step else {}))
        return float(self._record(name, entry, low if self._end == "low" else high))

    def suggest_int(
        self, name: str, low: int, high: int, *, step: int = 1, log: bool = False
    ) -> int:
        entry: dict[str, Any] = {"type": "int", "low": int(low), "high": int(high)}
        entry.update({"log": True} if log else {}, **({"step": step} if step != 1 else {}))
        values = list(range(int(low), int(high) + 1, int(step)))
        if not log and len(values) <= SMALL_INT:
            return int(self._decide(name, entry, values))
        return int(self._record(name, entry, values[0] if self._end == "low" else values[-1]))

    def suggest_uniform(self, name: str, low: float, high: float) -> float:
        return self.suggest_float(name, low, high)

    def suggest_loguniform(self, name: str, low: float, high: float) -> float:
        return self.suggest_float(name, low, high, log=True)

    def suggest_discrete_uniform(self, name: str, low: float, high: float, q: float) -> float:
        return self.suggest_float(name, low, high, step=q)

    def _decide(self, name: str, entry: dict[str, Any], values: list[Any]) -> Any:
        if name not in self.path.chosen:
            self.path.decisions.append((name, values))
        return self._record(name, entry, self._forced.get(name, values[0]))

    def _record(self, name: str, entry: dict[str, Any], value: Any) -> Any:
        if name in self.path.chosen:  # Optuna answers a name suggested again with its value
            return self.path.chosen[name]
        self.path.entries[name] = entry
        self.path.chosen[name] = value
        return value


def is_space_function(value: Any) -> bool:
    """Whether ``value`` is a function of one argument (a trial): not a dict, nor a
    function of none (a builder of a Tune ``param_space``)."""
    if not callable(value) or isinstance(value, Mapping):
        return False
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return False
    return _binds(signature, None) and not _binds(signature)


def _binds(signature: inspect.Signature, *args: Any) -> bool:
    try:
        signature.bind(*args)
    except TypeError:
        return False
    return True


def traced(target: str, function: Callable[[Any], Any]) -> dict[str, Any]:
    """The ``space`` entries that the define-by-run ``function`` (named ``target``) suggests,
    in the order it first suggests them, each with the ``when`` of its branches.

    Raises:
        SpaceFunctionError: what no ``space`` can say, naming the parameter and the fix.
    """
    paths = _explore(target, function)
    order = list(dict.fromkeys(name for path in paths for name in path.entries))
    entries: dict[str, Any] = {}
    for name in order:
        found = [path for path in paths if name in path.entries]
        kinds = {repr(path.entries[name]) for path in found}
        if len(kinds) > 1:
            raise SpaceFunctionError(
                f"'{target}' suggests '{name}' with other bounds in other branches "
                f"({' and '.join(sorted(kinds))}); give it one range, or give each branch's "
                "parameter its own name"
            )
        when = _condition(target, name, found, paths)
        entries[name] = {**found[0].entries[name], **({"when": when} if when else {})}
    for name, value in _constants(target, paths).items():
        if name in entries:
            raise SpaceFunctionError(
                f"'{target}' returns '{name}', which it also suggests; return only constants"
            )
        entries[name] = {"type": "constant", "value": value}
    return entries


def _explore(target: str, function: Callable[[Any], Any]) -> list[_Path]:
    """The function's paths: one for each combination of the choices it branches on."""
    pending: list[dict[str, Any]] = [{}]
    done: list[_Path] = []
    while pending:
        choices = pending.pop()
        path = _run(target, function, choices)
        free = [(name, values) for name, values in path.decisions if name not in choices]
        if free:
            name, values = free[0]
            pending.extend({**choices, name: value} for value in reversed(values))
        else:
            done.append(path)
        if len(done) + len(pending) > MAX_BRANCHES:
            raise SpaceFunctionError(
                f"'{target}' has more than {MAX_BRANCHES} branches; suggest in an Optuna "
                "objective instead (train: {optuna: mymod:objective})"
            )
    return done


def _run(target: str, function: Callable[[Any], Any], forced: Mapping[str, Any]) -> _Path:
    """The path ``forced`` takes, run with every range at its low end and at its high end:
    a function that branches on a range's value takes two paths, which it refuses."""
    ends = []
    for end in ("low", "high"):
        trial = _RecordingTrial(target, forced, end)
        try:
            returned = function(trial)
        except SpaceFunctionError:
            raise
        except Exception as exc:
            raise SpaceFunctionError(
                f"'{target}' raised {type(exc).__name__}: {exc} (a space function is run "
                "with a stand-in trial that has only suggest_* and params)"
            ) from None
        if returned is not None and not isinstance(returned, Mapping):
            raise SpaceFunctionError(
                f"'{target}' returned {type(returned).__name__}; a space function returns "
                "None or a dict of constants"
            )
        trial.path.constants = dict(returned or {})
        ends.append(trial.path)
    low, high = ends
    if low.entries != high.entries or low.constants.keys() != high.constants.keys():
        ranged = next(
            (name for name, entry in low.entries.items() if entry["type"] != "categorical"), "?"
        )
        raise SpaceFunctionError(
            f"'{target}' suggests other parameters, or other bounds, at the two ends of a "
            f"range (from '{ranged}'s value?); a space branches on choices: make it a "
            "categorical, or suggest in an Optuna objective (train: {optuna: mymod:objective})"
        )
    return low


def _condition(
    target: str, name: str, found: list[_Path], paths: list[_Path]
) -> dict[str, Any] | None:
    """The ``when`` under which ``name`` is suggested: the choices made before it on every
    path that suggests it, as few as tell those paths from the others."""
    if len(found) == len(paths):
        return None
    first = found[0]
    before = list(first.entries)[: list(first.entries).index(name)]
    deciders = [d for d, _ in first.decisions if d in before and all(d in p.chosen for p in found)]
    when = {d: _values(d, found) for d in deciders}
    if not _selects(when, found, paths):
        raise SpaceFunctionError(
            f"'{target}' suggests '{name}' under choices that one 'when' cannot name (an or "
            "of branches); give it one condition, or suggest in an Optuna objective"
        )
    for decider in list(when):
        fewer = {d: v for d, v in when.items() if d != decider}
        if fewer and _selects(fewer, found, paths):
            when = fewer
    return {d: v[0] if len(v) == 1 else v for d, v in when.items()}


def _values(name: str, paths: list[_Path]) -> list[Any]:
    return list(dict.fromkeys(path.chosen[name] for path in paths))


def _selects(when: Mapping[str, list[Any]], found: list[_Path], paths: list[_Path]) -> bool:
    """Whether ``when`` holds on exactly the paths ``found``."""

    def holds(path: _Path) -> bool:
        return all(d in path.chosen and path.chosen[d] in values for d, values in when.items())

    return all(holds(p) == any(p is f for f in found) for p in paths)


def _constants(target: str, paths: list[_Path]) -> dict[str, Any]:
    """What the function returns, the same on every path."""
    constants = paths[0].constants
    for path in paths[1:]:
        if path.constants != constants:
            raise SpaceFunctionError(
                f"'{target}' returns other constants in other branches; return the same "
                "dict on every branch (the branch's choices reach the trainable already)"
            )
    return constants
