"""W&B's run API for a script hpsearch runs as a command trial (see
:mod:`hpsearch.adapters.trial_apis`).

* :func:`init` starts the trial's run (once; a second call returns it, as W&B's does).
  Its :class:`Config` holds the trial's parameters (``HPSEARCH_PARAMS``) over the
  defaults ``init(config=...)`` gives, and keeps them: a ``config.update`` of one of them
  is ignored with W&B's warning, as a sweep's parameters are locked.
  A sweep's nested parameters (``model.depth``, of a group :data:`NESTED_VARIABLE`
  names) are nested there, ``config["model"]["depth"]``, as W&B nests them.
* :func:`log` is a report at the run's step: one JSON line, printed and appended to the
  trial's metrics file, as a command trial reports. The step goes up by one each call,
  as W&B's does (``step=`` and ``commit=False`` as in W&B); numbers are reported,
  media and text are taken and not recorded.
* The run's :class:`Summary` keeps each metric's last logged value, as W&B's does (the
  last report holds it already: the objective is read there, as a sweep reads its
  metric from the summary). What the script sets in it itself, and what
  :func:`define_metric`'s ``summary`` asks (``min``, ``max``, ``mean``, ``first``,
  ``last``, ``best``, under ``name.min`` and so on, as W&B names them), are the
  trial's final metrics when the run finishes (:func:`finish`, the end of a ``with
  wandb.init()`` block, or the script's exit).

Nothing is sent to W&B: the search's MLflow runs record the trial.
"""

from __future__ import annotations

import argparse
import atexit
import fnmatch
import json
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from _hpsearch_report import emit

__all__ = [
    "Config",
    "Error",
    "Histogram",
    "Image",
    "Run",
    "Settings",
    "Summary",
    "Table",
    "config",
    "define_metric",
    "finish",
    "init",
    "log",
    "login",
    "save",
    "summary",
    "unwatch",
    "watch",
]

SUMMARIES = ("min", "max", "mean", "first", "last", "best", "none")
"""What :func:`define_metric`'s ``summary`` may name (comma-separated), as W&B's."""


class Error(Exception):
    """W&B's error: what W&B itself raises for the same misuse."""


class Config:
    """The run's config: the trial's parameters over the script's defaults, read as
    attributes (``config.lr``) or items (``config["lr"]``)."""

    def __init__(self) -> None:
        object.__setattr__(self, "_items", {})
        object.__setattr__(self, "_locked", set())

    def _trial(self, params: Mapping[str, Any]) -> None:
        given = _nested(params, _groups())
        self._items.update(given)
        self._locked.update(given)

    def update(self, values: Any = None, allow_val_change: bool | None = None) -> None:
        """Add or change keys; the trial's parameters keep their values (W&B's warning)."""
        for key, value in _as_dict(values).items():
            if key in self._locked and self._items.get(key) != value:
                print(
                    f"wandb: WARNING Config item '{key}' was locked by 'sweep' (ignored update).",
                    file=sys.stderr,
                )
                continue
            self._items[key] = value

    def setdefaults(self, values: Any) -> None:
        """Set the keys not set yet (and, in a nested group the trial set, its keys not
        set yet: the defaults' ``model.width`` beside the sweep's ``model.depth``)."""
        for key, value in _as_dict(values).items():
            current = self._items.get(key)
            if key in self._locked and isinstance(current, dict) and isinstance(value, Mapping):
                self._items[key] = _under(current, value)
            else:
                self._items.setdefault(key, value)

    def as_dict(self) -> dict[str, Any]:
        """The config as a plain dict."""
        return dict(self._items)

    def get(self, key: str, default: Any = None) -> Any:
        return self._items.get(key, default)

    def keys(self) -> Any:
        return self._items.keys()

    def values(self) -> Any:
        return self._items.values()

    def items(self) -> Any:
        return self._items.items()

    def __getattr__(self, name: str) -> Any:
        try:
            return self._items[name]
        except KeyError:
            raise AttributeError(f"wandb.config has no key '{name}'") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self.update({name: value})

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return repr(self._items)


class Summary(dict[str, Any]):
    """The run's summary: each metric's last logged value, and what the script sets."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"the run's summary has no key '{name}'") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


class Run:
    """The trial's run (:func:`init` starts it)."""

    def __init__(self, params: Mapping[str, Any], project: str | None, name: str | None) -> None:
        self.config = config
        self.config._trial(params)
        self.summary = summary
        number = os.environ.get("HPSEARCH_TRIAL_NUMBER", "0")
        self.id = number
        self.name = name or f"trial-{number}"
        self.project = project or "hpsearch"
        folder = os.environ.get("HPSEARCH_TRIAL_DIR")
        self.dir = folder or os.getcwd()
        self.sweep_id = Path(folder).parent.name if folder else None
        self.step = 0
        self._pending: dict[str, Any] = {}
        self._summaries: list[tuple[str, list[str]]] = []
        self._seen: dict[str, list[float]] = {}
        self._finished = False

    def log(
        self, data: Mapping[str, Any], step: int | None = None, commit: bool | None = None
    ) -> None:
        """Log ``data`` at the run's step; committed (a report) as W&B commits it."""
        if step is not None:
            step = int(step)
            if step < self.step:
                print(
                    f"wandb: WARNING Tried to log to step {step} that is less than the current "
                    f"step {self.step}. Steps must be monotonically increasing, so this data "
                    "will be ignored.",
                    file=sys.stderr,
                )
                return
            if step > self.step:
                self._commit()
                self.step = step
        values = _flat(data)
        self._pending.update(values)
        for key, value in values.items():
            number = _number(value)
            if number is not None:
                self._seen.setdefault(key, []).append(number)
                self.summary[key] = number
        if commit or (commit is None and step is None):
            self._commit()

    def define_metric(
        self, name: str, step_metric: str | None = None, summary: str | None = None, **options: Any
    ) -> None:
        """How the summary keeps ``name`` (a glob, as W&B's); the rest shapes W&B's charts."""
        modes = [m.strip() for m in (summary or "").split(",") if m.strip()]
        unknown = [m for m in modes if m not in SUMMARIES]
        if unknown:
            known = ", ".join(SUMMARIES)
            raise Error(f"define_metric summary: unknown {unknown[0]!r}; use {known}")
        goal = options.get("goal")
        if goal not in (None, "minimize", "maximize"):
            raise Error(f"define_metric goal: {goal!r}; use minimize or maximize")
        if modes:
            best = "min" if goal == "minimize" else "max"
            self._summaries.append((name, [best if m == "best" else m for m in modes]))

    def finish(self, exit_code: int | None = None, quiet: bool | None = None) -> None:
        """End the run: what its summary adds to the last reports (:meth:`_final`) becomes
        the trial's final metrics."""
        if self._finished:
            return
        self._finished = True
        self._commit()
        final = self._final()
        if final:
            emit(final)
        if _Current.run is self:
            _Current.run = None

    def watch(self, *args: Any, **kwargs: Any) -> None:
        """Gradients and parameters go to W&B's charts alone: nothing to record."""

    def unwatch(self, *args: Any, **kwargs: Any) -> None:
        """As :meth:`watch`."""

    def save(self, *args: Any, **kwargs: Any) -> list[str]:
        """Files go to W&B alone; the trial's folder (``HPSEARCH_TRIAL_DIR``) keeps them."""
        return []

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        self.finish(exit_code=1 if kind is not None else 0)

    def _commit(self) -> None:
        if not self._pending:
            return
        numbers = {k: n for k, v in self._pending.items() if (n := _number(v)) is not None}
        numbers.pop("step", None)  # the report's own key
        if numbers:
            emit({**numbers, "step": self.step})
        self._pending = {}
        self.step += 1

    def _final(self) -> dict[str, float]:
        """What the summary adds to the last reports: a logged metric's last value is its
        last report's already (the objective is read there, as W&B's summary keeps it);
        what the script set itself, and :meth:`define_metric`'s summaries, are not."""
        final: dict[str, float] = {}
        for key, value in self.summary.items():
            number = _number(value)
            seen = self._seen.get(key)
            if number is not None and (not seen or seen[-1] != number):
                final[key] = number
        for key, seen in self._seen.items():
            for pattern, modes in self._summaries:
                if fnmatch.fnmatchcase(key, pattern):
                    final.update({f"{key}.{m}": _summarised(m, seen) for m in modes if m != "none"})
        return final


class Settings(dict[str, Any]):
    """W&B's settings: taken, nothing to set here."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(kwargs)


class _Media:
    """A W&B media object (image, histogram, ...): taken by :func:`log`, not recorded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        self.kwargs = kwargs


class Image(_Media):
    """W&B's image."""


class Histogram(_Media):
    """W&B's histogram."""


class Table(_Media):
    """W&B's table, its rows kept as added."""

    def __init__(
        self, columns: list[str] | None = None, data: list[Any] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.columns = list(columns or [])
        self.data = [list(row) for row in data or []]

    def add_data(self, *row: Any) -> None:
        self.data.append(list(row))

    def add_column(self, name: str, data: list[Any]) -> None:
        self.columns.append(name)


config = Config()
"""The run's config (the same object as ``run.config``)."""
summary = Summary()
"""The run's summary (the same object as ``run.summary``)."""


class _Current:
    """The running run, once :func:`init` started it (``wandb.run``)."""

    run: Run | None = None


def init(
    *,
    project: str | None = None,
    entity: str | None = None,
    config: Any = None,
    name: str | None = None,
    config_exclude_keys: list[str] | None = None,
    config_include_keys: list[str] | None = None,
    **_: Any,
) -> Run:
    """Start the trial's run: ``config`` is the script's defaults, the trial's parameters
    set over them. Called again while it runs, the same run."""
    if _Current.run is not None:
        return _Current.run
    params = json.loads(os.environ.get("HPSEARCH_PARAMS") or "{}")
    run = _Current.run = Run(params, project, name)
    defaults = _as_dict(config)
    if config_include_keys:
        defaults = {k: v for k, v in defaults.items() if k in config_include_keys}
    for key in config_exclude_keys or ():
        defaults.pop(key, None)
    run.config.setdefaults(defaults)
    atexit.register(run.finish)
    return run


def log(data: Mapping[str, Any], step: int | None = None, commit: bool | None = None) -> None:
    """Log to the running run (:meth:`Run.log`)."""
    _running("log").log(data, step=step, commit=commit)


def define_metric(name: str, *args: Any, **kwargs: Any) -> None:
    """As :meth:`Run.define_metric`, for the running run."""
    _running("define_metric").define_metric(name, *args, **kwargs)


def finish(exit_code: int | None = None, quiet: bool | None = None) -> None:
    """End the running run (nothing where none runs, as W&B's)."""
    if _Current.run is not None:
        _Current.run.finish(exit_code)


def watch(*args: Any, **kwargs: Any) -> None:
    """As :meth:`Run.watch`."""


def unwatch(*args: Any, **kwargs: Any) -> None:
    """As :meth:`Run.unwatch`."""


def save(*args: Any, **kwargs: Any) -> list[str]:
    """As :meth:`Run.save`."""
    return []


def login(*args: Any, **kwargs: Any) -> bool:
    """Nothing to log in to."""
    return True


def __getattr__(name: str) -> Any:
    if name == "run":
        return _Current.run
    raise AttributeError(
        f"wandb.{name}: hpsearch answers W&B's run API in its command trials (init, config, "
        "log, summary, define_metric, finish, and media taken but not recorded); "
        f"{name} is not among it"
    )


def _running(what: str) -> Run:
    if _Current.run is None:
        raise Error(f"You must call wandb.init() before wandb.{what}()")
    return _Current.run


def _as_dict(values: Any) -> dict[str, Any]:
    if values is None:
        return {}
    if isinstance(values, argparse.Namespace):
        return dict(vars(values))
    if isinstance(values, (Mapping, Config)):
        return {str(k): values[k] for k in values}
    if hasattr(values, "__dict__"):
        return {k: v for k, v in vars(values).items() if not k.startswith("_")}
    kind = type(values).__name__
    raise TypeError(f"wandb config: expected a dict or an argparse namespace, got {kind}")


NESTED_VARIABLE = "HPSEARCH_WANDB_NESTED"
"""Names the groups whose dotted parameters are nested (``hpsearch.trial.script`` has it
too: this module imports nothing of hpsearch)."""


def _groups() -> set[str]:
    """The groups whose dotted parameters the config holds nested (:data:`NESTED_VARIABLE`)."""
    named = os.environ.get(NESTED_VARIABLE, "").split(",")
    return {group.strip() for group in named if group.strip()}


def _nested(params: Mapping[str, Any], groups: set[str]) -> dict[str, Any]:
    """``params`` with each ``group.name`` of ``groups`` as ``{"group": {"name": ...}}``,
    deeper dots deeper, as W&B gives a sweep's nested parameters; other names as they are
    (a group that is also a parameter's own name is not nested)."""
    nested: dict[str, Any] = {}
    for name, value in params.items():
        group, dot, rest = name.partition(".")
        if not dot or group not in groups or group in params:
            nested[name] = value
            continue
        node = nested.setdefault(group, {})
        *parents, leaf = rest.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def _under(given: dict[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` over ``defaults``: each key ``given`` lacks, from ``defaults``, deeply."""
    merged = dict(defaults)
    for key, value in given.items():
        inner = merged.get(key)
        if isinstance(value, dict) and isinstance(inner, Mapping):
            merged[key] = _under(value, inner)
        else:
            merged[key] = value
    return merged


def _flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts' keys joined by dots, as W&B shows them."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _number(value: Any) -> float | None:
    """A number (numpy's and torch's scalars included), or ``None`` for anything else."""
    if callable(getattr(value, "item", None)):
        try:  # an array or tensor of more than one element refuses (ValueError, RuntimeError)
            value = value.item()
        except (TypeError, ValueError, RuntimeError):
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _summarised(mode: str, seen: list[float]) -> float:
    finite = [v for v in seen if not math.isnan(v)] or seen
    choose: dict[str, Callable[[list[float]], float]] = {
        "min": min,
        "max": max,
        "mean": lambda values: sum(values) / len(values),
        "first": lambda values: values[0],
        "last": lambda values: values[-1],
    }
    return choose[mode](seen if mode in ("first", "last") else finite)
