"""The YAML search-space syntax and its translation into Optuna distributions.

In a config, each entry of ``space`` is one of::

    lr: {type: float, low: 1.0e-4, high: 0.1, log: true}    # float, optional log or step
    width: {type: int, low: 16, high: 256, step: 16}         # int, optional log or step
    act: {type: categorical, choices: [relu, gelu]}          # categorical
    batch_size: [32, 64, 128]                                # shorthand for categorical
    epochs: 20                                               # a constant, passed as is
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, Literal

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

CategoricalChoice = None | bool | int | float | str


class _ParamModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


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
    """A float between ``low`` and ``high``, optionally on a log scale or a grid of ``step``."""

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
        return FloatDistribution(self.low, self.high, log=self.log, step=self.step)


class IntParam(_ParamModel):
    """An integer between ``low`` and ``high`` inclusive, optionally log-scaled or stepped."""

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
        return IntDistribution(self.low, self.high, log=self.log, step=self.step)


class CategoricalParam(_ParamModel):
    """One of a list of plain values (null, booleans, numbers, strings)."""

    type: Literal["categorical"]
    choices: list[CategoricalChoice]

    @model_validator(mode="after")
    def _check(self) -> CategoricalParam:
        if not self.choices:
            raise _invalid("choices is empty", "list at least one value")
        seen: list[CategoricalChoice] = []
        for choice in self.choices:
            # `1 == True` in Python, so compare type and value.
            if any(type(choice) is type(s) and choice == s for s in seen):
                raise _invalid(f"choice {choice!r} is listed twice", "list each choice once")
            seen.append(choice)
        return self

    def distribution(self) -> BaseDistribution:
        """The equivalent Optuna distribution."""
        return CategoricalDistribution(tuple(self.choices))


class ConstantParam(_ParamModel):
    """A value passed to every trial unchanged (not searched)."""

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
    is left for validation (it must carry ``type``).
    """
    if isinstance(value, list):
        return {"type": "categorical", "choices": value}
    if not isinstance(value, Mapping):
        return {"type": "constant", "value": value}
    return value


class SearchSpace:
    """The validated ``space`` section: what Optuna searches and what stays fixed."""

    def __init__(self, params: Mapping[str, ParamSpec]) -> None:
        self._params = dict(params)

    @property
    def params(self) -> dict[str, ParamSpec]:
        """Every entry, in the order of the config."""
        return dict(self._params)

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

    def trial_params(self, sampled: Mapping[str, Any]) -> dict[str, Any]:
        """The full parameter dict a trial receives: sampled values and constants, config order."""
        constants = self.constants()
        return {
            name: constants[name] if name in constants else sampled[name] for name in self._params
        }
