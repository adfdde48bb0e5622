"""A config's search space against the space its study was searched with.

Optuna keeps each trial's distributions but checks a new one against them only
when a trial sets the parameter, and then only its kind: a changed range, or an
added parameter, mixes silently into one study (``best`` of one config then
answers with a trial of the other), and a changed kind crashes the driver in the
middle of a trial. The driver compares the two spaces before its first trial:

- a parameter whose kind changed (float, int, categorical), whose log scale
  changed, or whose choices changed can never share the study (Optuna refuses
  it): an error, the way out a new ``study.name``;
- a changed range (``low``, ``high``, ``step``) is an error unless
  ``study.allow_space_change`` (``--allow-space-change``) says the change is meant;
- a parameter added or removed is a warning, or an error under ``study.strict_space``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    distribution_to_json,
    json_to_distribution,
)
from optuna.trial import FrozenTrial

if TYPE_CHECKING:
    from hpsearch.config import RunConfig

SPACE_ATTR = "hpsearch.space"
"""On the study: the distributions of the space its latest driver searched (Optuna's JSON)."""


@dataclass(frozen=True)
class SpaceCheck:
    """What a driver is told about its space against the study's.

    Attributes:
        problem: why the driver must not run (empty: it may).
        notes: what it may run with but should know (one line each).
    """

    problem: str = ""
    notes: tuple[str, ...] = ()


def stored_space(
    attrs: Mapping[str, object], trials: Callable[[], Iterable[FrozenTrial]]
) -> dict[str, BaseDistribution]:
    """The study's space: as its last driver recorded it, else as its trials sampled it
    (a study an earlier hpsearch created; ``trials`` is read only then)."""
    recorded = attrs.get(SPACE_ATTR)
    if isinstance(recorded, dict):
        return {name: json_to_distribution(text) for name, text in recorded.items()}
    space: dict[str, BaseDistribution] = {}
    for trial in trials():
        for name, distribution in trial.distributions.items():
            space.setdefault(name, distribution)
    return space


def space_attr(space: Mapping[str, BaseDistribution]) -> dict[str, str]:
    """The value of :data:`SPACE_ATTR` for ``space``."""
    return {name: distribution_to_json(d) for name, d in space.items()}


def compare_spaces(
    study: Mapping[str, BaseDistribution],
    config: Mapping[str, BaseDistribution],
    *,
    allow_change: bool = False,
    strict: bool = False,
) -> SpaceCheck:
    """Compare the config's space with the study's (see the module)."""
    if not study or not config:
        return SpaceCheck()  # a new study, or a space its objective defines as it runs
    refused: list[str] = []
    ranges: list[str] = []
    for name in sorted(set(study) & set(config)):
        before, after = study[name], config[name]
        if before == after:
            continue
        change = f"{name} is {describe(after)}, the study has {describe(before)}"
        (ranges if _range_only(before, after) else refused).append(change)
    added = sorted(set(config) - set(study))
    removed = sorted(set(study) - set(config))
    notes: list[str] = []
    if added:
        notes.append(f"parameter(s) not in the study's space: {', '.join(added)}")
    if removed:
        notes.append(f"the study's parameter(s) not in this space: {', '.join(removed)}")
    if refused:
        return SpaceCheck(
            f"space.{refused[0]}, a change Optuna cannot mix into one study; "
            "give the study a new study.name"
        )
    if ranges and not allow_change:
        return SpaceCheck(
            f"space.{ranges[0]}; give the study a new study.name, or pass "
            "--allow-space-change (study.allow_space_change: true) to search the new range "
            "in this study"
        )
    if (added or removed) and strict:
        return SpaceCheck(
            f"space: {notes[0]}; give the study a new study.name, or set "
            "study.strict_space: false to mix them into this study"
        )
    notes[:0] = [f"space.{change} (allowed: study.allow_space_change)" for change in ranges]
    return SpaceCheck(notes=tuple(notes))


def config_space_check(
    config: RunConfig, attrs: Mapping[str, object], trials: Callable[[], Iterable[FrozenTrial]]
) -> SpaceCheck:
    """The config's space against its study's (``attrs``, its user attributes; ``trials``
    read only for a study an earlier hpsearch created): the problem, if any, as the one
    line a command prints (the file, the parameter, both definitions, the way out)."""
    spec = config.study
    check = compare_spaces(
        stored_space(attrs, trials),
        config.search_space.distributions(),
        allow_change=spec.allow_space_change,
        strict=spec.strict_space,
    )
    problem = f"{config.source}: {check.problem} (study '{spec.name}')" if check.problem else ""
    return SpaceCheck(problem, tuple(f"study '{spec.name}': {note}" for note in check.notes))


def describe(distribution: BaseDistribution) -> str:
    """A distribution as the config would write it, in one short phrase."""
    if isinstance(distribution, CategoricalDistribution):
        return f"a choice of {json.dumps(list(distribution.choices), default=str)}"
    if isinstance(distribution, FloatDistribution | IntDistribution):
        kind = "float" if isinstance(distribution, FloatDistribution) else "int"
        text = f"{kind} [{distribution.low}, {distribution.high}]"
        if distribution.log:
            text += " log"
        if distribution.step is not None and distribution.step != 1:
            text += f" step {distribution.step}"
        return text
    return repr(distribution)


def _range_only(before: BaseDistribution, after: BaseDistribution) -> bool:
    """Whether only the bounds or step differ (Optuna lets such a change into a study)."""
    numeric = (FloatDistribution, IntDistribution)
    return (
        type(before) is type(after)
        and isinstance(before, numeric)
        and isinstance(after, numeric)
        and before.log == after.log
    )
