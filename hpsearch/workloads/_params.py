"""What every built-in workload does with its parameters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def resolve_params(
    params: Mapping[str, Any],
    defaults: Mapping[str, Any],
    workload: str,
    *,
    knobs: bool = False,
) -> dict[str, Any]:
    """``params`` over ``defaults``; a name the workload does not read is an error.

    A typo in the config's ``space`` would otherwise be searched and silently ignored.
    With ``knobs``, the throughput knobs of :mod:`hpsearch.torch` are read too.
    """
    known = set(defaults)
    if knobs:
        from hpsearch.torch import KNOB_NAMES

        known |= KNOB_NAMES
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(
            f"the {workload} workload has no parameter(s) {unknown}; "
            f"its parameters are {sorted(defaults)}"
            + (" and the throughput knobs of hpsearch.torch.Knobs" if knobs else "")
        )
    return {**defaults, **params}
