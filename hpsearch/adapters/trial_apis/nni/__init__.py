"""NNI's trial API for a script hpsearch runs as a command trial (see
:mod:`hpsearch.adapters.trial_apis`).

* :func:`get_next_parameter` returns the trial's parameters (``HPSEARCH_PARAMS``), a
  nested choice (of :data:`NESTED_VARIABLE`) as NNI gives it, ``{"_name": ..., ...}``.
* :func:`report_intermediate_result` is a report at the next step, and
  :func:`report_final_result` the trial's final metrics: one JSON line each, printed
  and appended to the trial's metrics file, as a command trial reports. A number is
  the metric ``default``, as NNI names it; a dict is its metrics as they are.
* :func:`get_experiment_id`, :func:`get_trial_id` and :func:`get_sequence_id` name
  the study and the trial.

Where NNI itself is installed, its other modules (``nni.nas``, ``nni.compression``,
...) still import from there: this package's path goes on into NNI's.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import sys
from pathlib import Path
from typing import Any

from _hpsearch_report import emit

__all__ = [
    "get_current_parameter",
    "get_experiment_id",
    "get_next_parameter",
    "get_sequence_id",
    "get_trial_id",
    "report_final_result",
    "report_intermediate_result",
]

_HERE = Path(__file__).resolve().parent


class _Trial:
    """This process's trial: its parameters once read, and the reports it made."""

    params: dict[str, Any] | None = None
    reports = 0


def _installed_nni() -> list[str]:
    """NNI's own package folder, where it is installed further along the path."""
    elsewhere = [p for p in sys.path if Path(p or ".").resolve() != _HERE.parent]
    spec = importlib.machinery.PathFinder.find_spec("nni", elsewhere)
    return list(spec.submodule_search_locations or []) if spec else []


__path__ = [str(_HERE), *_installed_nni()]  # NNI's own modules, found there


def get_next_parameter() -> dict[str, Any]:
    """The trial's parameters, by name (NNI's ``get_next_parameter``)."""
    if _Trial.params is None:
        text = os.environ.get("HPSEARCH_PARAMS")
        if text is None:
            raise RuntimeError(
                "nni.get_next_parameter: no trial's parameters (HPSEARCH_PARAMS): this "
                "nni is hpsearch's, for scripts it runs as command trials"
            )
        _Trial.params = _nested(json.loads(text), _choices())
    return dict(_Trial.params)


NESTED_VARIABLE = "HPSEARCH_NNI_NESTED"
"""Names the nested choices (``hpsearch.trial.script`` has it too: this module imports
nothing of hpsearch)."""


def _choices() -> set[str]:
    """The nested choices the parameters hold (:data:`NESTED_VARIABLE`)."""
    named = os.environ.get(NESTED_VARIABLE, "").split(",")
    return {choice.strip() for choice in named if choice.strip()}


def _nested(params: dict[str, Any], choices: set[str], scope: str = "") -> dict[str, Any]:
    """The parameters in ``scope`` (``optimizer.sgd.``: the sgd branch's), each nested
    choice as NNI gives it: ``{"_name": "sgd", "momentum": 0.5}`` from ``optimizer`` and
    ``optimizer.sgd.momentum``."""
    branches = [f"{c}.{params[c]}." for c in choices if c.startswith(scope) and c in params]
    given: dict[str, Any] = {}
    for name, value in params.items():
        if not name.startswith(scope) or any(name.startswith(b) for b in branches):
            continue  # another scope's, or in the chosen branch of a choice in this one
        if name in choices:
            branch = _nested(params, choices, f"{name}.{value}.")
            given[name[len(scope) :]] = {"_name": value, **branch}
        else:
            given[name[len(scope) :]] = value
    return given


def get_current_parameter(tag: str | None = None) -> Any:
    """The parameters :func:`get_next_parameter` returned, or the one named ``tag``."""
    params = get_next_parameter()
    return params if tag is None else params[tag]


def report_intermediate_result(metric: Any) -> None:
    """A report at the trial's next step (0, 1, ...), judged by the pruner."""
    emit({"step": _Trial.reports, **_metrics(metric)})
    _Trial.reports += 1


def report_final_result(metric: Any) -> None:
    """The trial's final metrics: its objective's value is this one."""
    emit(_metrics(metric))


def get_experiment_id() -> str:
    """The study's name: the folder of the trial's own (``trials_dir/<study>/trial-N``)."""
    folder = os.environ.get("HPSEARCH_TRIAL_DIR")
    return Path(folder).parent.name if folder else "hpsearch"


def get_trial_id() -> str:
    """The trial's number, as text."""
    return os.environ.get("HPSEARCH_TRIAL_NUMBER", "0")


def get_sequence_id() -> int:
    """The trial's number."""
    return int(get_trial_id())


def _metrics(metric: Any) -> dict[str, Any]:
    if isinstance(metric, dict):
        return {str(k): _number(v) for k, v in metric.items()}
    return {"default": _number(metric)}


def _number(value: Any) -> Any:
    """A number as JSON holds it (numpy's and torch's scalars included; a NaN is written
    as Python's ``json`` writes and reads it, and the trial then says it is NaN)."""
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    return value
