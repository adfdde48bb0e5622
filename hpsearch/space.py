"""The YAML search-space syntax and its translation into Optuna distributions.

In a config, each entry of ``space`` is one of::

    lr: {type: float, low: 1.0e-4, high: 0.1, log: true}    # float, optional log or step
    width: {type: int, low: 16, high: 256, step: 16}         # int, optional log or step
    act: {type: categorical, choices: [relu, gelu]}          # categorical
    batch_size: [32, 64, 128]                                # shorthand for categorical
    epochs: 20                                               # a constant, passed as is

A parameter that exists only under some choices of an earlier one carries
``when`` (every key must hold; a list is any of its values)::

    optimizer: [sgd, adam]
    momentum: {type: float, low: 0.0, high: 0.99, when: {optimizer: sgd}}
    beta1: {type: float, low: 0.8, high: 0.999, when: {optimizer: adam}}

or is written under its branch, which expands to the same::

    optimizer:
      sgd: {momentum: {type: float, low: 0.0, high: 0.99}}
      adam: {beta1: {type: float, low: 0.8, high: 0.999}}

Such a space is suggested define-by-run (``trial.suggest_*`` in config order),
so a trial has, and is given, only the parameters of its branch.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

if TYPE_CHECKING:  # Optuna is imported where a distribution is made: a config loads without it
    import optuna
    from optuna.distributions import BaseDistribution

CategoricalChoice = None | bool | int | float | str


Condition = dict[str, list[CategoricalChoice] | CategoricalChoice]
"""``when``: earlier parameter name to the value (or any of the values) it must have."""


class _ParamModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    when: Condition | None = None

    def active(self, chosen: Mapping[str, Any]) -> bool:
        """Whether this parameter exists, given the values ``chosen`` so far."""
        for name, wanted in (self.when or {}).items():
            if name not in chosen:
                return False
            values = wanted if isinstance(wanted, list) else [wanted]
            if not any(_same(chosen[name], value) for value in values):
                return False
        return True


def _same(a: Any, b: Any) -> bool:
    # `1 == True` in Python, so compare type and value.
    return type(a) is type(b) and bool(a == b)


def _invalid(problem: str, fix: str) -> PydanticCustomError:
    # The "; " separates problem from fix; config error formatting keeps both.
    return PydanticCustomError(
        "invalid_space", "{problem}; {fix}", {"problem": problem, "fix": fix}
    )


def _check_range(
    low: float, high: float, log: bool, step: float | None, positive_example: str
) -> None:
    """The rules a numeric range obeys, for floats and ints alike.

    Args:
        low, high, log: the range.
        step: the grid step; ``None`` when there is no grid (an int's step 1).
        positive_example: a valid ``low`` to suggest for a log scale.
    """
    if low > high:
        raise _invalid(f"low ({low}) is greater than high ({high})", "swap them")
    if log and low <= 0:
        raise _invalid(
            f"log scale needs low > 0 (got {low})",
            f"set low to a positive value such as {positive_example}, or set log: false",
        )
    if step is None:
        return
    if log:
        raise _invalid("step and log cannot be combined", "remove one of them")
    if step <= 0:
        raise _invalid(f"step must be > 0 (got {step})", "use a positive step")
    # Decimal, so that 0.1-steps divide 0..1 exactly.
    start, span, grid = (
        Decimal(str(low)),
        Decimal(str(high)) - Decimal(str(low)),
        Decimal(str(step)),
    )
    if span % grid:
        raise _invalid(
            f"the range {low}..{high} is not a whole number of steps of {step}",
            f"set high to {start + span // grid * grid} (or adjust step)",
        )


class FloatParam(_ParamModel):
    """A float between ``low`` and ``high``, optionally on a log scale or a grid of ``step``.

    Attributes:
        type: ``float``.
        low, high: the range, both ends included.
        log: sample on a log scale (``low`` above 0).
        step: the grid's spacing (none: any value; not with ``log``).
        when: the branch this parameter belongs to: earlier parameters' names and the
            value (or list of values) each must have, e.g. ``{optimizer: sgd}``; none:
            every trial has it.
    """

    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: float | None = None

    @model_validator(mode="after")
    def _check(self) -> FloatParam:
        _check_range(self.low, self.high, self.log, self.step, "1.0e-5")
        return self

    def distribution(self) -> BaseDistribution:
        """The equivalent Optuna distribution."""
        from optuna.distributions import FloatDistribution

        return FloatDistribution(self.low, self.high, log=self.log, step=self.step)


class IntParam(_ParamModel):
    """An integer between ``low`` and ``high`` inclusive, optionally log-scaled or stepped.

    Attributes:
        type: ``int``.
        low, high: the range, both ends included.
        log: sample on a log scale (``low`` at least 1).
        step: the spacing of the values tried (not with ``log``).
        when: the branch this parameter belongs to: earlier parameters' names and the
            value (or list of values) each must have, e.g. ``{optimizer: sgd}``; none:
            every trial has it.
    """

    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: int = 1

    @model_validator(mode="after")
    def _check(self) -> IntParam:
        _check_range(self.low, self.high, self.log, None if self.step == 1 else self.step, "1")
        return self

    def distribution(self) -> BaseDistribution:
        """The equivalent Optuna distribution."""
        from optuna.distributions import IntDistribution

        return IntDistribution(self.low, self.high, log=self.log, step=self.step)


class CategoricalParam(_ParamModel):
    """One of a list of plain values (null, booleans, numbers, strings); a plain YAML list
    says the same.

    Attributes:
        type: ``categorical``.
        choices: the values, each listed once.
        when: the branch this parameter belongs to: earlier parameters' names and the
            value (or list of values) each must have, e.g. ``{optimizer: sgd}``; none:
            every trial has it.
    """

    type: Literal["categorical"]
    choices: list[CategoricalChoice]

    @field_validator("choices", mode="before")
    @classmethod
    def _plain(cls, choices: Any) -> Any:
        # Before pydantic tries each type of the union on a list or a mapping, and says so.
        for choice in choices if isinstance(choices, list) else ():
            if choice is not None and not isinstance(choice, bool | int | float | str):
                kind = type(choice).__name__
                kind = "mapping" if isinstance(choice, Mapping) else kind
                raise _invalid(
                    f"choice {choice!r:.60} is a {kind}",
                    "a choice is a number, a string, a boolean or null: choose among names "
                    "and look the value up in train",
                )
        return choices

    @model_validator(mode="after")
    def _check(self) -> CategoricalParam:
        if not self.choices:
            raise _invalid("choices is empty", "list at least one value")
        seen: list[CategoricalChoice] = []
        for choice in self.choices:
            if any(_same(choice, s) for s in seen):
                raise _invalid(f"choice {choice!r} is listed twice", "list each choice once")
            seen.append(choice)
        return self

    def distribution(self) -> BaseDistribution:
        """The equivalent Optuna distribution."""
        from optuna.distributions import CategoricalDistribution

        return CategoricalDistribution(tuple(self.choices))


class ConstantParam(_ParamModel):
    """A value passed to every trial unchanged (not searched); a plain YAML value says the same.

    Attributes:
        type: ``constant``.
        value: the value.
        when: the branch this parameter belongs to: earlier parameters' names and the
            value (or list of values) each must have, e.g. ``{optimizer: sgd}``; none:
            every trial has it.
    """

    type: Literal["constant"]
    value: Any


ParamSpec = Annotated[
    FloatParam | IntParam | CategoricalParam | ConstantParam, Field(discriminator="type")
]
"""One entry of the ``space`` section."""

SEARCHED_TYPES = ("float", "int", "categorical")


def expand_shorthand(value: Any) -> Any:
    """Turn the shorthands of one space entry into its explicit form.

    A list becomes a categorical; a plain value becomes a constant; a mapping
    is left for validation (it must carry ``type``). An Optuna distribution, as a dict
    config holds one (``FloatDistribution(1e-4, 1e-1, log=True)``, what ``OptunaSearchCV``'s
    ``param_distributions`` take), becomes the entry it samples alike.
    """
    distribution = _from_optuna(value)
    if distribution is not None:
        return distribution
    if isinstance(value, list):
        return {"type": "categorical", "choices": value}
    if not isinstance(value, Mapping):
        return {"type": "constant", "value": value}
    return value


def _from_optuna(value: Any) -> dict[str, Any] | None:
    """The explicit entry of an Optuna distribution; ``None``: ``value`` is none (read by
    its attributes: Optuna is not imported for it)."""
    kind = type(value)
    if not kind.__module__.startswith("optuna.distributions"):
        return None
    if kind.__name__ == "CategoricalDistribution":
        return {"type": "categorical", "choices": list(value.choices)}
    if kind.__name__ not in ("FloatDistribution", "IntDistribution"):
        return None  # left as a constant, which validation shows
    number = "float" if kind.__name__ == "FloatDistribution" else "int"
    entry: dict[str, Any] = {"type": number, "low": value.low, "high": value.high}
    if value.log:
        entry["log"] = True
    if value.step is not None and not (number == "int" and value.step == 1):
        entry["step"] = value.step
    return entry


_CALL = re.compile(r"\s*(?:ray\.)?(tune\.|hp\.)?([a-z_]+)\s*\((.*)\)\s*", re.DOTALL)
"""A distribution written as Python call text: ``tune.loguniform(1e-4, 1e-1)``."""

_CALLS: dict[str, tuple[str, bool, int]] = {
    # name: (type, log, what to take from an exclusive upper bound), as Ray Tune reads them
    "uniform": ("float", False, 0),
    "quniform": ("float", False, 0),
    "loguniform": ("float", True, 0),
    "qloguniform": ("float", True, 0),
    "randint": ("int", False, 1),
    "qrandint": ("int", False, 0),
    "lograndint": ("int", True, 1),
    "qlograndint": ("int", True, 0),
}

_NO_RANGE = {
    "choice": "the list of choices alone: [a, b, ...]",
    "grid_search": "the list of choices alone: [a, b, ...] (study.sampler.type: grid runs each)",
    "randn": "{type: float, low: .., high: ..} (hpsearch searches no normal distribution)",
    "qrandn": "{type: float, low: .., high: ..} (hpsearch searches no normal distribution)",
    "sample_from": "a range or a list of choices (a value computed from others: "
    "train: {optuna: mymod:objective})",
}


def written_call(value: Any) -> str | None:
    """The space entry meant by ``value`` when it is a distribution written as text (a Ray
    Tune or hyperopt call pasted into YAML: ``tune.loguniform(1e-4, 1e-1)``), else ``None``.

    Without this the text would be a constant, passed to every trial as a string.
    """
    found = _CALL.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        return None
    prefix, name, text = found.groups()
    if name not in _CALLS and name not in _NO_RANGE and not name.startswith("suggest_"):
        return None
    try:
        args = ast.literal_eval(f"({text},)") if text.strip() else ()
    except (ValueError, SyntaxError):
        args = ()
    choices = [a for a in args if isinstance(a, list | tuple)]
    if name in ("choice", "grid_search") and choices:
        return json.dumps(list(choices[-1]))
    if name in _NO_RANGE:
        return _NO_RANGE[name]
    numbers = [a for a in args if isinstance(a, int | float) and not isinstance(a, bool)]
    if name not in _CALLS or not numbers:
        return "{type: float|int, low: .., high: .., log: true|false}"
    kind, log, exclusive = _CALLS[name]
    if len(numbers) == 1:
        numbers = [0, *numbers]  # hyperopt's randint(label, upper)
    low, high = numbers[0], numbers[1] - exclusive  # Tune's randint leaves its upper bound out
    if prefix == "hp." and log:  # hyperopt's bounds are exponents of e
        low, high = float(f"{math.exp(low):.4g}"), float(f"{math.exp(high):.4g}")
    entry = f"{{type: {kind}, low: {low}, high: {high}"
    if log:
        entry += ", log: true"
    elif len(numbers) > 2 and name.startswith("q"):
        entry += f", step: {numbers[2]}"
    return entry + "}"


def _is_branches(value: Any) -> bool:
    """A mapping of choice to its parameters (no ``type``; each value a mapping or null)."""
    return (
        isinstance(value, Mapping)
        and bool(value)
        and "type" not in value
        and all(v is None or isinstance(v, Mapping) for v in value.values())
    )


def expand_space(entries: Mapping[str, Any], when: Condition | None = None) -> dict[str, Any]:
    """The ``space`` section with shorthands and branches written out, in config order.

    A branch entry (``optimizer: {sgd: {momentum: ...}, adam: null}``) becomes a
    categorical of its choices, followed by each branch's parameters with
    ``when: {optimizer: <choice>}`` (added to any condition of the branch itself).

    Raises:
        ValueError: a parameter name used twice (in two branches, or beside one).
    """
    expanded: dict[str, Any] = {}

    def put(name: str, entry: Any) -> None:
        if name in expanded:
            raise ValueError(
                f"'{name}' is listed twice (in two branches, or beside one); "
                "give each branch's parameter its own name"
            )
        expanded[name] = entry

    for name, given in entries.items():
        # Ray Tune's tune.grid_search([...]) is {"grid_search": [...]}: its choices.
        grid = isinstance(given, Mapping) and set(given) == {"grid_search"}
        value = given["grid_search"] if grid else given
        if _is_branches(value):
            put(name, {"type": "categorical", "choices": list(value), **_with(when)})
            for choice, inner in value.items():
                condition = {**(when or {}), name: choice}
                for inner_name, inner_entry in expand_space(inner or {}, condition).items():
                    put(inner_name, inner_entry)
            continue
        meant = written_call(value)
        if meant is not None:
            raise ValueError(f"'{name}' is the text {value!r}, not a range; write {name}: {meant}")
        entry = expand_shorthand(value)
        if when and isinstance(entry, Mapping):
            entry = {**entry, "when": {**when, **entry.get("when", {})}}
        put(name, entry)
    return expanded


def _with(when: Condition | None) -> dict[str, Any]:
    return {"when": dict(when)} if when else {}


class SearchSpace:
    """The validated ``space`` section: what Optuna searches and what stays fixed."""

    def __init__(self, params: Mapping[str, ParamSpec]) -> None:
        self._params = dict(params)

    @property
    def params(self) -> dict[str, ParamSpec]:
        """Every entry, in the order of the config."""
        return dict(self._params)

    def searched(self) -> list[str]:
        """The names of the searched parameters (not the constants), in the config's order."""
        return [name for name, spec in self._params.items() if not isinstance(spec, ConstantParam)]

    def distributions(self) -> dict[str, BaseDistribution]:
        """Optuna distributions of the searched parameters, for ``Study.ask``."""
        return {
            name: spec.distribution()
            for name, spec in self._params.items()
            if not isinstance(spec, ConstantParam)
        }

    def constants(self) -> dict[str, Any]:
        """Parameters passed unchanged to every trial."""
        return {
            name: spec.value
            for name, spec in self._params.items()
            if isinstance(spec, ConstantParam)
        }

    @property
    def conditional(self) -> bool:
        """Whether some parameter exists only under a choice (``when``)."""
        return any(spec.when for spec in self._params.values())

    def check_conditions(self) -> None:
        """Check that every ``when`` names an earlier parameter and values it can have.

        Raises:
            ValueError: naming the parameter, the condition and the fix.
        """
        seen: dict[str, ParamSpec] = {}
        for name, spec in self._params.items():
            for other, wanted in (spec.when or {}).items():
                earlier = seen.get(other)
                if earlier is None:
                    where = "later in space" if other in self._params else "not in space"
                    raise ValueError(
                        f"{name}.when names '{other}', which is {where}; "
                        "a condition names a parameter listed before it"
                    )
                possible = _possible_values(earlier)
                for value in wanted if isinstance(wanted, list) else [wanted]:
                    if possible is not None and not any(_same(value, p) for p in possible):
                        raise ValueError(
                            f"{name}.when: {other} is never {value!r}; use one of {list(possible)}"
                        )
            seen[name] = spec

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Sample ``trial``'s parameters define-by-run, in config order: only the active ones.

        Returns:
            The sampled values (constants excluded), as ``trial.params`` will hold them.
        """
        chosen: dict[str, Any] = {}  # what conditions read: constants included
        sampled: dict[str, Any] = {}
        for name, spec in self._params.items():
            if not spec.active(chosen):
                continue
            if isinstance(spec, ConstantParam):
                chosen[name] = spec.value
                continue
            value: Any
            if isinstance(spec, FloatParam):
                value = trial.suggest_float(name, spec.low, spec.high, log=spec.log, step=spec.step)
            elif isinstance(spec, IntParam):
                value = trial.suggest_int(name, spec.low, spec.high, log=spec.log, step=spec.step)
            else:
                value = trial.suggest_categorical(name, spec.choices)
            chosen[name] = sampled[name] = value
        return sampled

    def fixed(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """A trial to run first (``study.enqueue``), as the parameter values Optuna fixes:
        flat names (a nested mapping, as a Tune ``points_to_evaluate`` entry, is
        ``outer.inner``), each a searched parameter and a value it can take.

        Raises:
            ValueError: naming the parameter, the value and what it may be.
        """
        flat = flat_names(given)
        searched = {n: s for n, s in self._params.items() if not isinstance(s, ConstantParam)}
        for name, value in flat.items():
            spec = searched.get(name)
            if spec is None:
                kind = "a constant" if name in self._params else "not in space"
                raise ValueError(
                    f"'{name}' is {kind}; give values of searched parameters "
                    f"({', '.join(searched)}), the rest are sampled"
                )
            allowed = _outside(spec, value)
            if allowed:
                raise ValueError(f"{name}: {value!r} is not {allowed}; give one that is")
        return flat

    def trial_params(self, sampled: Mapping[str, Any]) -> dict[str, Any]:
        """The full parameter dict a trial receives: sampled values and the constants that
        apply, config order (a parameter whose ``when`` does not hold is left out)."""
        chosen: dict[str, Any] = {}
        for name, spec in self._params.items():
            if isinstance(spec, ConstantParam):
                if spec.active(chosen):
                    chosen[name] = spec.value
            elif name in sampled:
                chosen[name] = sampled[name]
        return chosen


def flat_names(given: Mapping[str, Any], prefix: str = "", separator: str = ".") -> dict[str, Any]:
    """Nested mappings as dotted names: ``{"opt": {"lr": 0.1}}`` is ``{"opt.lr": 0.1}``
    (``separator="/"``: ``opt/lr``, as Ray Tune names a nested result's metrics)."""
    flat: dict[str, Any] = {}
    for key, value in given.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flat_names(value, f"{name}{separator}", separator))
        else:
            flat[name] = value
    return flat


def _outside(spec: ParamSpec, value: Any) -> str:
    """What ``value`` would have to be for ``spec`` to take it ("": it can take it)."""
    if isinstance(spec, CategoricalParam):
        if any(_same(value, choice) for choice in spec.choices):
            return ""
        return "one of its choices: " + ", ".join(repr(c) for c in spec.choices)
    if not isinstance(spec, FloatParam | IntParam):
        return ""
    whole = isinstance(spec, IntParam)
    number = isinstance(value, int if whole else int | float) and not isinstance(value, bool)
    step = spec.step
    if number and spec.low <= value <= spec.high:
        steps = 0.0 if step is None else (value - spec.low) / step
        if math.isclose(steps, round(steps), abs_tol=1e-9):  # on the grid (none: anywhere)
            return ""
    grid = f" on its step {step} from {spec.low}" if step is not None else ""
    return f"{'an integer' if whole else 'a number'} in [{spec.low}, {spec.high}]{grid}"


def _possible_values(spec: ParamSpec) -> tuple[Any, ...] | None:
    """The values a parameter can take when they can be listed (``None``: a range)."""
    if isinstance(spec, CategoricalParam):
        return tuple(spec.choices)
    if isinstance(spec, ConstantParam):
        return (spec.value,)
    return None
