"""The config that runs one trial again: its values fixed, its branch only, its seed."""

from __future__ import annotations

from hpsearch.config import RunConfig, load_config
from hpsearch.results import TrialResult, trial_config
from tests.conftest import ConfigWriter, merge


def test_a_conditional_trial_exports_its_branch_and_its_seed(write_config: ConfigWriter) -> None:
    space = {
        "x": {"type": "float", "low": 0.0, "high": 1.0},
        "optimizer": {
            "sgd": {"momentum": {"type": "float", "low": 0.0, "high": 0.9}, "nesterov": True},
            "adam": {"beta1": [0.9, 0.99]},
        },
    }
    # The trials the search ran first are not the rerun's: its one trial is this one.
    config = load_config(write_config({"space": space, "study": {"enqueue": [{"x": 0.75}]}}))
    trial = TrialResult(
        study="test-study",
        number=5,
        state="COMPLETE",
        params={"x": 0.25, "optimizer": "sgd", "momentum": 0.5},
        values=[1.0],
        seed=5,
    )

    data = trial_config(config, trial, "test-study-rerun-5")

    assert data["space"] == {
        "x": [0.25],
        "steps": {"type": "constant", "value": 3},
        "optimizer": ["sgd"],
        "momentum": [0.5],
        "nesterov": {"type": "constant", "value": True},
    }
    assert data["study"]["sampler"] == {"type": "random", "seed": 5}
    assert "enqueue" not in data["study"]
    again = RunConfig.model_validate(merge(data, {}))
    assert again.search_space.trial_params({"x": 0.25, "optimizer": "sgd", "momentum": 0.5}) == {
        "x": 0.25,
        "steps": 3,
        "optimizer": "sgd",
        "momentum": 0.5,
        "nesterov": True,
    }
