"""Ray Tune trainables as Ray's users write them (no hpsearch import), for the tests."""

from __future__ import annotations

from typing import Any

from ray import tune


def with_data(config: dict[str, Any], data: dict[str, float]) -> None:
    """A trainable whose data ``tune.with_parameters`` puts in Ray's object store."""
    tune.report({"score": config["x"] * data["k"]})


trainable = tune.with_parameters(with_data, data={"k": 2.0})
