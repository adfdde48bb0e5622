"""What every built-in workload does with its parameters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def resolve_params(
    params: Mapping[str, Any], defaults: Mapping[str, Any], workload: str
) -> dict[str, Any]:
    """``params`` over ``defaults``; a name the workload does not read is an error.

    A typo in the config's ``space`` would otherwise be searched and silently ignored.
    """
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise ValueError(
            f"the {workload} workload has no parameter(s) {unknown}; "
            f"its parameters are {sorted(defaults)}"
        )
    return {**defaults, **params}
