"""A config's space against its study's: the rule, and the driver that applies it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from hpsearch.config import load_config
from hpsearch.errors import StudyError
from hpsearch.study import DRIVERS_ATTR, open_study
from hpsearch.study._space_check import SPACE_ATTR, compare_spaces
from tests.conftest import BASE_CONFIG, ConfigWriter

LR = FloatDistribution(1e-4, 1e-1, log=True)
SPACE = {"lr": LR, "depth": IntDistribution(1, 4), "act": CategoricalDistribution(["relu", "gelu"])}


def _with_space(**space: object) -> str:
    """The base config's text with its space's parameters replaced (not merged)."""
    return yaml.safe_dump({**BASE_CONFIG, "space": {**BASE_CONFIG["space"], **space}})


def test_the_same_space_or_a_new_study_says_nothing() -> None:
    assert compare_spaces(SPACE, dict(SPACE)) == compare_spaces({}, SPACE)
    assert not compare_spaces(SPACE, dict(SPACE)).problem
    assert not compare_spaces(SPACE, dict(SPACE)).notes


def test_a_changed_range_is_refused_unless_allowed_and_then_noted() -> None:
    wider = {**SPACE, "depth": IntDistribution(1, 8)}
    refused = compare_spaces(SPACE, wider)
    assert refused.problem.startswith("space.depth is int [1, 8], the study has int [1, 4]")
    assert "--allow-space-change" in refused.problem
    allowed = compare_spaces(SPACE, wider, allow_change=True)
    assert not allowed.problem
    assert allowed.notes == (
        "space.depth is int [1, 8], the study has int [1, 4] (allowed: study.allow_space_change)",
    )


@pytest.mark.parametrize(
    ("name", "changed", "says"),
    [
        ("lr", CategoricalDistribution([1e-3, 1e-2]), "a choice of [0.001, 0.01]"),
        ("lr", FloatDistribution(1e-4, 1e-1), "float [0.0001, 0.1], the study has float"),
        ("act", CategoricalDistribution(["relu", "silu"]), 'a choice of ["relu", "silu"]'),
        ("depth", FloatDistribution(1.0, 4.0), "float [1.0, 4.0]"),
    ],
)
def test_a_changed_kind_log_scale_or_choices_is_refused_even_when_changes_are_allowed(
    name: str, changed: object, says: str
) -> None:
    check = compare_spaces(SPACE, {**SPACE, name: changed}, allow_change=True)  # type: ignore[dict-item]
    assert check.problem.startswith(f"space.{name} is {says}")
    assert "new study.name" in check.problem
    assert "--allow-space-change" not in check.problem


def test_an_added_or_removed_parameter_is_noted_or_refused_when_strict() -> None:
    changed = {"lr": LR, "act": SPACE["act"], "width": IntDistribution(8, 64)}
    check = compare_spaces(SPACE, changed)
    assert not check.problem
    assert check.notes == (
        "parameter(s) not in the study's space: width",
        "the study's parameter(s) not in this space: depth",
    )
    strict = compare_spaces(SPACE, changed, strict=True)
    assert strict.problem.startswith("space: parameter(s) not in the study's space: width")
    assert "study.strict_space: false" in strict.problem


def test_a_driver_refuses_a_changed_space_in_one_line_and_records_nothing(
    write_config: ConfigWriter, project: Path
) -> None:
    first = open_study(load_config(write_config()), as_driver=True)
    assert first.study.user_attrs[SPACE_ATTR].keys() == {"x"}
    trial = first.ask(load_config(write_config()).search_space.distributions())
    first.study.tell(trial, 0.5)
    drivers = first.study.user_attrs[DRIVERS_ATTR]

    changed = write_config({"space": {"x": {"type": "float", "low": 0.0, "high": 2.0}}})
    with pytest.raises(StudyError) as refused:
        open_study(load_config(changed), as_driver=True)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        f"{changed}: space.x is float [0.0, 2.0], the study has float [0.0, 1.0]"
    )
    assert "(study 'test-study')" in message
    assert first.study.user_attrs[DRIVERS_ATTR] == drivers  # not counted as a driver

    allowed = load_config(changed).with_overrides(allow_space_change=True)
    handle = open_study(allowed, as_driver=True)
    assert handle.notes == (
        "study 'test-study': space.x is float [0.0, 2.0], the study has float [0.0, 1.0] "
        "(allowed: study.allow_space_change)",
    )
    # The study now has the new range: the old config is the changed one.
    with pytest.raises(StudyError, match=r"space\.x is float \[0\.0, 1\.0\]"):
        open_study(load_config(write_config()), as_driver=True)


def test_a_study_an_earlier_hpsearch_created_is_checked_against_its_trials(
    write_config: ConfigWriter, project: Path
) -> None:
    # Opened by a reader only: no space recorded; its one trial sampled x in [0, 1].
    config = load_config(write_config())
    handle = open_study(config)
    handle.study.tell(handle.ask(config.search_space.distributions()), 0.5)
    assert SPACE_ATTR not in handle.study.user_attrs

    kinded = write_config(_with_space(x={"type": "categorical", "choices": [0.0, 1.0]}))
    with pytest.raises(StudyError, match=r"space\.x is a choice of \[0\.0, 1\.0\], the study has"):
        open_study(load_config(kinded), as_driver=True)
