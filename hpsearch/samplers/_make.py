"""The Optuna sampler a ``study.sampler`` section names: by short name, or any class by path.

Short names: ``tpe``, ``random``, ``nsga2``, ``gp`` (Gaussian process), ``grid``
(every combination of the space, which must then be finite: categoricals, ints,
and floats with a ``step``), ``cmaes`` (CMA-ES, needs the ``cmaes`` package) and
``qmc`` (quasi-Monte Carlo, Sobol by default). Any other sampler is named by its
import path, ``package.module:Class`` or ``package.module.Class``, e.g.
``optuna.samplers.BruteForceSampler``; ``options`` go to its constructor and
``seed`` too when it takes one.

A TPE sampler (the default) ranks numeric choices (``batch_size: [16, 32, 64]``):
what it learns of one choice weighs on its neighbours (:mod:`hpsearch.samplers._ordered_tpe`).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import optuna
from pydantic import ValidationError

from hpsearch._options import construct_checked, parameters
from hpsearch.adapters import user_function
from hpsearch.config import SamplerSpec
from hpsearch.errors import ConfigError
from hpsearch.samplers._ordered_tpe import order_numeric_choices
from hpsearch.space import CategoricalParam, ConstantParam, FloatParam, IntParam, SearchSpace


class _GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid, without its end-of-grid ``study.stop()``.

    ``GridSampler.after_trial`` stops the study once every point ran, which
    raises outside ``Study.optimize``: hpsearch tells trials itself. The search's
    budget ends it there instead: at most the grid's points (:func:`grid_points`).
    """

    def after_trial(
        self,
        study: optuna.Study,
        trial: optuna.trial.FrozenTrial,
        state: optuna.trial.TrialState,
        values: Sequence[float] | None,
    ) -> None:
        """Nothing: the search's budget ends it."""


SAMPLERS: dict[str, Callable[..., optuna.samplers.BaseSampler]] = {
    "tpe": optuna.samplers.TPESampler,
    "random": optuna.samplers.RandomSampler,
    "nsga2": optuna.samplers.NSGAIISampler,
    "gp": optuna.samplers.GPSampler,
    "grid": _GridSampler,
    "cmaes": optuna.samplers.CmaEsSampler,
    "qmc": optuna.samplers.QMCSampler,
}
"""The samplers a config names by short name."""

MOST_GRID_POINTS = 100_000
"""The largest grid ``grid`` enumerates (a larger one is a config error, not a hang)."""


def make_sampler(
    spec: SamplerSpec, source: str = "<config>", space: SearchSpace | None = None
) -> optuna.samplers.BaseSampler:
    """The sampler ``spec`` names, with its seed and options.

    Args:
        spec: the ``study.sampler`` section.
        source: the config file (for messages).
        space: the search space (``grid`` enumerates it).

    Raises:
        ConfigError: an unknown class, options it does not take, or a grid over a
            space that is not finite.
    """
    factory = SAMPLERS.get(spec.type) or _imported(spec.type, source)
    kwargs = dict(spec.options)
    if spec.type == "grid" and "search_space" not in kwargs:
        kwargs["search_space"] = grid_of(space or SearchSpace({}), source)
    if spec.seed is not None and _takes(factory, "seed"):
        kwargs["seed"] = spec.seed
    kwargs.update(_functions_named(factory, kwargs, source))
    kwargs.update(_samplers_named(factory, kwargs, source, space))
    sampler = construct_checked(factory, kwargs, "study.sampler", source)
    if not isinstance(sampler, optuna.samplers.BaseSampler):
        raise ConfigError(
            source,
            "study.sampler.type",
            f"'{spec.type}' made a {type(sampler).__name__}, not an Optuna sampler",
            "name a subclass of optuna.samplers.BaseSampler",
        )
    order_numeric_choices(sampler)  # batch_size: [16, 32, 64] is a scale, not three names
    return sampler


def grid_points(spec: SamplerSpec, space: SearchSpace, source: str = "<config>") -> int | None:
    """How many points a ``grid`` sampler visits (``None``: another sampler). Optuna's grid
    stops its study once each has run; a search ends there too, whatever its budget."""
    if spec.type != "grid":
        return None
    grid = spec.options.get("search_space") or grid_of(space, source)
    return math.prod(len(values) for values in grid.values())


def grid_of(space: SearchSpace, source: str) -> dict[str, list[Any]]:
    """Every value of every searched parameter, for ``GridSampler``.

    Raises:
        ConfigError: a float without ``step`` (no finite grid), or more than
            :data:`MOST_GRID_POINTS` combinations.
    """
    grid: dict[str, list[Any]] = {}
    points = 1
    for name, spec in space.params.items():
        if isinstance(spec, ConstantParam):
            continue
        if isinstance(spec, CategoricalParam):
            values: list[Any] = list(spec.choices)
        elif isinstance(spec, IntParam) and not spec.log:
            values = list(range(spec.low, spec.high + 1, spec.step))
        elif isinstance(spec, FloatParam) and spec.step is not None:
            low, step = Decimal(str(spec.low)), Decimal(str(spec.step))
            count = int((Decimal(str(spec.high)) - low) / step) + 1
            values = [float(low + i * step) for i in range(count)]
        else:
            raise ConfigError(
                source,
                f"space.{name}",
                f"sampler grid needs a finite set of values, and {name} is a "
                f"{'log-scaled ' if getattr(spec, 'log', False) else ''}range",
                "give it a step (and no log), or list its choices",
            )
        grid[name] = values
        points *= len(values)
    if points > MOST_GRID_POINTS:
        raise ConfigError(
            source,
            "study.sampler.type",
            f"the grid has {points} combinations (most: {MOST_GRID_POINTS})",
            "use fewer values per parameter, or another sampler",
        )
    return grid


def _functions_named(
    factory: Callable[..., Any], options: dict[str, Any], source: str
) -> dict[str, Callable[..., Any]]:
    """The options the sampler takes as functions (``constraints_func``, TPE's ``gamma``),
    which a YAML config names as ``package.module:function``, imported.

    Raises:
        ConfigError: one names no function that imports.
    """
    return {
        option: user_function(value, source, f"study.sampler.options.{option}")
        for option, value in _taking(factory, options, "Callable")
        if isinstance(value, str)
    }


def _samplers_named(
    factory: Callable[..., Any], options: dict[str, Any], source: str, space: SearchSpace | None
) -> dict[str, optuna.samplers.BaseSampler]:
    """The options the sampler takes as another sampler (CMA-ES's and GP's
    ``independent_sampler``), written as a sampler section of their own (``{type: random,
    seed: 1}``) or a type alone, made as ``study.sampler`` is.

    Raises:
        ConfigError: at the option's own keys (``...independent_sampler.type``).
    """
    samplers = {}
    for option, value in _taking(factory, options, "BaseSampler"):
        section = {"type": value} if isinstance(value, str) else value
        key = f"study.sampler.options.{option}"
        if isinstance(section, optuna.samplers.BaseSampler) or section is None:
            continue  # a dict config's own sampler, or Optuna's default
        if not isinstance(section, Mapping):
            raise ConfigError(
                source,
                key,
                f"{option} is a sampler, not {value!r}",
                "write a sampler section, e.g. {type: random, seed: 1}, or its type alone",
            )
        try:
            spec = SamplerSpec.model_validate(section)
        except ValidationError as exc:
            problem = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            fix = "write a sampler section, e.g. {type: random}"
            raise ConfigError(source, key, problem, fix) from None
        try:
            samplers[option] = make_sampler(spec, source, space)
        except ConfigError as exc:
            raise ConfigError(
                source, exc.key.replace("study.sampler", key, 1), exc.problem, exc.fix
            ) from None
    return samplers


def _taking(
    factory: Callable[..., Any], options: dict[str, Any], kind: str
) -> list[tuple[str, Any]]:
    """The options whose annotation in ``factory``'s signature names ``kind`` (``Callable``,
    ``BaseSampler``), with their values; none where it has no signature to read."""
    try:
        parameters_of = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # the options go as they are
        return []
    return [
        (option, value)
        for option, value in options.items()
        if option in parameters_of and kind in str(parameters_of[option].annotation)
    ]


def _takes(factory: Callable[..., Any], option: str) -> bool:
    try:
        return option in parameters(factory)
    except (TypeError, ValueError):  # no signature to read
        return False


def _short_names() -> dict[str, str]:
    """The short name of each short-named sampler, by its Optuna class's name."""
    names = {}
    for short, factory in SAMPLERS.items():
        # _GridSampler is Optuna's GridSampler less its study.stop(): named as Optuna's.
        public = next(
            c for c in getattr(factory, "__mro__", (factory,)) if c.__module__.startswith("optuna")
        )
        names[public.__name__] = short
    return names


def _optuna_sampler_named(name: str) -> str | None:
    """The Optuna sampler class a short word names, its case, underscores and ``Sampler``
    aside (``nsgaiii``, ``brute_force``), where no short name does; else ``None``."""
    word = name.lower().replace("_", "").removesuffix("sampler")
    for attribute in dir(optuna.samplers):
        candidate = getattr(optuna.samplers, attribute)
        if (
            isinstance(candidate, type)
            and issubclass(candidate, optuna.samplers.BaseSampler)
            and attribute.lower().removesuffix("sampler") == word
        ):
            return attribute
    return None


def _imported(path: str, source: str) -> Callable[..., optuna.samplers.BaseSampler]:
    """The sampler class at ``package.module:Class`` or ``package.module.Class``."""
    module_name, sep, attribute = path.partition(":")
    if not sep:
        module_name, _, attribute = path.rpartition(".")
    fix = f"use one of {', '.join(SAMPLERS)}, or a class path such as optuna.samplers.TPESampler"
    if not module_name or not attribute:
        close = difflib.get_close_matches(path, list(SAMPLERS), n=1)
        if close:
            fix = f"did you mean '{close[0]}'?"
        optunas = _optuna_sampler_named(path)  # nsgaiii, bruteforce, TPESampler, ...
        if optunas is not None:
            fix = f"write type: optuna.samplers.{optunas}"
            short = _short_names().get(optunas)
            if short is not None:
                fix = f"write type: {short} (Optuna's {optunas}), or optuna.samplers.{optunas}"
        raise ConfigError(source, "study.sampler.type", f"unknown sampler '{path}'", fix)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            source, "study.sampler.type", f"cannot import '{module_name}' ({exc})", fix
        ) from None
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise ConfigError(
            source, "study.sampler.type", f"module '{module_name}' has no class '{attribute}'", fix
        )
    sampler: Callable[..., optuna.samplers.BaseSampler] = factory
    return sampler
