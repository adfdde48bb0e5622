"""An NNI search space (``search_space.json``) as a hpsearch config's ``space``.

=====================================================  ======================================
NNI ``{"_type": ..., "_value": ...}``                  hpsearch
=====================================================  ======================================
``choice`` of values                                   the list of choices
``choice`` of ``{"_name": ..., <params>}``             branches (``name: {choice: {params}}``),
                                                       a branch's ``p`` named ``name.choice.p``
``randint [lower, upper)``                             ``{type: int, low, high: upper - 1}``
``uniform [low, high]``                                ``{type: float, low, high}``
``quniform [low, high, q]``                            ``{type: float, low, high, step: q}``
``loguniform [low, high]``                             ``{type: float, low, high, log: true}``
``qloguniform [low, high, q]``                         ``log: true`` without the step (a note)
=====================================================  ======================================

A nested choice reaches the trial as NNI gives it, ``{"_name": "sgd", "momentum": 0.5}``:
its branches' parameters are named ``optimizer.sgd.momentum`` in the space (two branches
may each have a ``momentum``, as NNI's own nested example's have a ``pooling_size``), and
the converted ``train.env`` names the choices (:data:`NNI_NESTED_VARIABLE`), which
``nni.get_next_parameter()`` nests again. Optuna takes no step on a log scale:
``qloguniform`` is searched on its log range without ``q`` (whole numbers where its
bounds and ``q`` are), as Ray Tune's ``OptunaSearch`` searches ``qloguniform``, and a
note says so. ``normal``,
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
from hpsearch.trial.script import NNI_NESTED_VARIABLE

_NO_DISTRIBUTION = {"normal", "qnormal", "lognormal", "qlognormal"}
Key = tuple[str | int, ...]


TRIAL_CODE_NOTE = (
    "NNI's trial code runs as it is: hpsearch answers nni.get_next_parameter() and "
    "nni.report_*_result()."
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
    train_env = nested_env(space)
    folder = path.resolve().parent.name
    name = folder if path.stem == "search_space" and folder else path.stem
    study = {"name": name or "nni-search"}
    config = {"study": study, "objective": dict(NNI_OBJECTIVE), "space": space}
    return Converted(config, "an NNI search space", notes, train_env)


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


def nested_env(space: dict[str, Any]) -> dict[str, str]:
    """The ``train.env`` that makes ``nni.get_next_parameter()`` nest the nested choices of
    ``space`` (a converted one) as NNI does; empty where it has none."""
    choices: list[str] = []

    def walk(entries: dict[str, Any]) -> None:
        for name, entry in entries.items():
            if isinstance(entry, dict) and "type" not in entry:  # branches
                choices.append(name)
                for inner in entry.values():
                    walk(inner or {})

    walk(space)
    return {NNI_NESTED_VARIABLE: ",".join(choices)} if choices else {}


def _entries(
    source: Source,
    entries: dict[str, Any],
    prefix: Key,
    key_of: dict[str, Key],
    notes: list[str],
    *,
    scope: str = "",
) -> dict[str, Any]:
    """``entries`` as ``space`` entries, each named ``scope`` + its name."""
    space: dict[str, Any] = {}
    for name, entry in entries.items():
        key, full = (*prefix, name), f"{scope}{name}"
        space[full] = _entry(source, key, entry, key_of, notes, name=full)
        key_of.setdefault(full, key)
    return space


def _entry(
    source: Source, key: Key, entry: Any, key_of: dict[str, Key], notes: list[str], *, name: str
) -> Any:
    if not isinstance(entry, dict) or "_type" not in entry or "_value" not in entry:
        raise source.error(key, 'must be {"_type": ..., "_value": [...]}')
    kind, value = entry["_type"], entry["_value"]
    if not isinstance(value, list) or not value:
        raise source.error((*key, "_value"), "must be a non-empty list")
    if kind == "choice":
        return _choice(source, key, value, key_of, notes, name=name)
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
    source: Source,
    key: Key,
    values: list[Any],
    key_of: dict[str, Key],
    notes: list[str],
    *,
    name: str,
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
        branch = str(value["_name"])
        at = (*key, "_value", index)
        inner = _entries(source, params, at, key_of, notes, scope=f"{name}.{branch}.")
        branches[branch] = inner or None
    return branches


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
