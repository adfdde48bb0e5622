"""``nni.utils.merge_parameter``, as NNI's examples call it."""

from __future__ import annotations

from typing import Any


def merge_parameter(base_params: Any, override_params: dict[str, Any] | None) -> Any:
    """``base_params`` (an argparse ``Namespace``, a dict or another object) with each of
    ``override_params`` set, as NNI's does: a key it lacks, or a value of another type
    than the one it replaces (an int for a float excepted), is a ``ValueError``."""
    if override_params is None:
        return base_params
    is_dict = isinstance(base_params, dict)
    for key, value in override_params.items():
        if (key not in base_params) if is_dict else not hasattr(base_params, key):
            raise ValueError(f"Key '{key}' not found in base parameters.")
        base = base_params[key] if is_dict else getattr(base_params, key)
        merged = _compatible(key, base, value)
        if is_dict:
            base_params[key] = merged
        else:
            setattr(base_params, key, merged)
    return base_params


def _compatible(key: str, base: Any, override: Any) -> Any:
    if base is None or isinstance(override, type(base)):
        return override
    if isinstance(base, float) and isinstance(override, int):
        return float(override)
    raise ValueError(
        f'Expected "{key}" in override parameters to have type {type(base).__name__}, '
        f"but found {type(override).__name__}"
    )
