"""An NNI search space (``search_space.json``) as a hpsearch config's ``space``.

=====================================================  ======================================
NNI ``{"_type": ..., "_value": ...}``                  hpsearch
=====================================================  ======================================
``choice`` of values                                   the list of choices
``choice`` of ``{"_name": ..., <params>}``             branches (``name: {choice: {params}}``)
``randint [lower, upper)``                             ``{type: int, low, high: upper - 1}``
``uniform [low, high]``                                ``{type: float, low, high}``
``quniform [low, high, q]``                            ``{type: float, low, high, step: q}``
``loguniform [low, high]``                             ``{type: float, low, high, log: true}``
``qloguniform [low, high, q]``                         ``log: true`` without the step (a note)
=====================================================  ======================================

A nested choice's parameters reach the trial flat, beside the choice (NNI gives a
nested dict). Optuna takes no step on a log scale: ``qloguniform`` is searched on its
log range without ``q`` (whole numbers where its bounds and ``q`` are), as Ray Tune's
``OptunaSearch`` searches ``qloguniform``, and a note says so. ``normal``,
``lognormal`` and their ``q`` forms have no Optuna distribution: a one-line error
naming the entry. The search space names no trial: ``hpsearch convert --train ...``
adds it (an NNI trial script runs as it is: :mod:`hpsearch.adapters.trial_apis`), or the
written file says it is still to add. The objective is NNI's metric ``default``,
maximised, as NNI's tuners default to; ``--metric`` replaces it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hpsearch.convert._base import Converted, Source, checked_space, log_range_unstepped

_NO_DISTRIBUTION = {"normal", "qnormal", "lognormal", "qlognormal"}
Key = tuple[str | int, ...]


TRIAL_CODE_NOTE = (
    "NNI's trial code runs as it is: hpsearch answers nni.get_next_parameter() and "
    "nni.report_*_result() (nested choices arrive flat)."
)
NNI_OBJECTIVE = {"metric": "default", "direction": "maximize"}
"""NNI's metric (a number reported is ``default``), maximised, as its tuners are by default."""


def from_nni(path: Path) -> Converted:
    """The hpsearch config of the NNI search space in ``path``.

    Raises:
        ConfigError: an entry with no hpsearch equivalent, naming it.
    """
    source = Source(path, lambda key: None)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise source.error((), "file not found", "check the path") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise source.error((), f"cannot read it as JSON ({exc})") from None
    notes = [
        "NNI's tuner and budget are in its experiment config: name them here (or convert "
        "that config instead). " + TRIAL_CODE_NOTE,
        "objective: NNI's metric 'default' (a number reported), maximised as NNI's tuners "
        "are by default (optimize_mode); --metric and --direction to change it.",
    ]
    space, _ = space_of(source, document, (), notes)
    folder = path.resolve().parent.name
    name = folder if path.stem == "search_space" and folder else path.stem
    study = {"name": name or "nni-search"}
    config = {"study": study, "objective": dict(NNI_OBJECTIVE), "space": space}
    return Converted(config, "an NNI search space", notes)


def space_of(
    source: Source, document: Any, prefix: Key, notes: list[str]
) -> tuple[dict[str, Any], dict[str, Key]]:
    """The ``space`` of an NNI search space (``document``, at ``prefix`` in ``source``),
    checked as a config's, and each entry's key in the source.

    Raises:
        ConfigError: an entry with no hpsearch equivalent, or one hpsearch would refuse.
    """
    if not isinstance(document, dict) or not document:
        raise source.error(prefix, "not an NNI search space (a JSON object of parameters)")
    key_of: dict[str, Key] = {}
    space = _entries(source, document, prefix, key_of, notes)
    checked_space(source, space, key_of)
    return space, key_of


def _entries(
    source: Source,
    entries: dict[str, Any],
    prefix: Key,
    key_of: dict[str, Key],
    notes: list[str],
) -> dict[str, Any]:
    space: dict[str, Any] = {}
    for name, entry in entries.items():
        key = (*prefix, name)
        space[name] = _entry(source, key, entry, key_of, notes)
        key_of.setdefault(name, key)
    return space


def _entry(source: Source, key: Key, entry: Any, key_of: dict[str, Key], notes: list[str]) -> Any:
    if not isinstance(entry, dict) or "_type" not in entry or "_value" not in entry:
        raise source.error(key, 'must be {"_type": ..., "_value": [...]}')
    kind, value = entry["_type"], entry["_value"]
    if not isinstance(value, list) or not value:
        raise source.error((*key, "_value"), "must be a non-empty list")
    if kind == "choice":
        return _choice(source, key, value, key_of, notes)
    if kind in _NO_DISTRIBUTION:
        raise source.error(
            (*key, "_type"),
            f"'{kind}' has no Optuna distribution",
            "use uniform, quniform, loguniform, randint or choice",
        )
    bounds = {"randint": 2, "uniform": 2, "loguniform": 2, "quniform": 3, "qloguniform": 3}
    if kind not in bounds:
        raise source.error((*key, "_type"), f"'{kind}' is not an NNI type")
    if len(value) != bounds[kind] or not all(_number(v) for v in value):
        raise source.error((*key, "_value"), f"{kind} takes {bounds[kind]} numbers")
    if kind == "randint":  # NNI's upper bound is excluded
        return {"type": "int", "low": int(value[0]), "high": int(value[1]) - 1}
    if kind == "qloguniform":
        return log_range_unstepped(key, kind, *value, notes=notes)
    low, high = float(value[0]), float(value[1])
    if kind == "quniform":
        return {"type": "float", "low": low, "high": high, "step": value[2]}
    return {
        "type": "float",
        "low": low,
        "high": high,
        **({"log": True} if kind == "loguniform" else {}),
    }


def _choice(
    source: Source, key: Key, values: list[Any], key_of: dict[str, Key], notes: list[str]
) -> Any:
    nested = [isinstance(v, dict) for v in values]
    if not any(nested):
        return list(values)
    if not all(nested) or not all("_name" in v for v in values):
        raise source.error(
            (*key, "_value"),
            'a nested choice needs every value to be {"_name": ..., <parameters>}',
        )
    branches: dict[str, Any] = {}
    for index, value in enumerate(values):
        params = {k: v for k, v in value.items() if k != "_name"}
        inner = _entries(source, params, (*key, "_value", index), key_of, notes)
        branches[str(value["_name"])] = inner or None
    return branches


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
