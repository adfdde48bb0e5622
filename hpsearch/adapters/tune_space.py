"""A Ray Tune ``param_space`` as hpsearch's ``space``: ``space: mymod:param_space``.

A Ray Tune user keeps the search space in their code, built from
``tune.uniform``, ``tune.loguniform``, ``tune.quniform``, ``tune.randint``,
``tune.choice``, ``tune.grid_search`` and constants. :func:`space_from_tune`
imports it and writes each entry as the ``space`` section's own form, which
Optuna's distributions then search:

==========================================  ===========================================
Tune                                        ``space``
==========================================  ===========================================
``uniform(a, b)`` / ``loguniform(a, b)``     ``{type: float, low: a, high: b[, log: true]}``
``quniform(a, b, q)``                        ``{type: float, low: a, high: b, step: q}``
``qloguniform(a, b, q)``                     ``{type: float, low: a, high: b, log: true}``
``randint(a, b)`` (``b`` excluded)           ``{type: int, low: a, high: b - 1}``
``lograndint``, ``qrandint(a, b, q)``        ``{type: int, ..., log: true}`` / ``step: q``
``qlograndint(a, b, q)``                     ``{type: int, ..., log: true}``
``choice([...])``, ``grid_search([...])``    the list of choices
a constant (a list too)                      ``{type: constant, value: ...}``
a nested dict                                its entries, named ``outer.inner``
==========================================  ===========================================

The trainable gets the nested config back (``hpsearch.adapters``).
Optuna cannot step a log scale: a quantized log domain is searched without its
step, as Ray Tune's own ``OptunaSearch`` searches it, and a
:class:`TuneSpaceWarning` says so. What has no Optuna distribution at all
(``sample_from``, ``randn``) is an error naming the entry and what to write
instead. A define-by-run function of a trial (``OptunaSearch(space=fn)``) is read
by :mod:`hpsearch.adapters._space_function`.
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Mapping
from typing import Any

from hpsearch._importable import ModuleExited, ensure_importable_from, import_user_module
from hpsearch.adapters._space_function import is_space_function, traced
from hpsearch.adapters.forms import refused_on_import


class TuneSpaceError(ValueError):
    """An entry of a Tune ``param_space`` with no ``space`` equivalent."""


class TuneSpaceWarning(UserWarning):
    """An entry of a Tune ``param_space`` searched otherwise than Tune samples it."""


def space_from_tune(target: str) -> dict[str, Any]:
    """The ``space`` entries of the Tune ``param_space`` that ``package.module:name`` names:
    a module attribute, or a function of no arguments that returns it (Ray's own examples
    build theirs under ``if __name__ == "__main__":``, so a user wraps it in one).

    Raises:
        TuneSpaceError: the name does not import, is not a dict (nor a function
            returning one), or holds an entry with no Optuna distribution.
    """
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise TuneSpaceError(f"'{target}' is not of the form package.module:param_space")
    ensure_importable_from(os.getcwd())  # the user's project, as for train
    refused = refused_on_import(module_name)
    if refused is not None:
        raise TuneSpaceError("; ".join(refused))
    try:
        module = import_user_module(module_name)
    except ModuleExited as exc:
        raise TuneSpaceError(str(exc)) from None
    except Exception as exc:
        raise TuneSpaceError(
            f"importing '{module_name}' failed: {type(exc).__name__}: {exc}"
        ) from None
    return space_of(target, getattr(module, attribute, None))


def space_of(target: str, space: Any) -> dict[str, Any]:
    """The ``space`` entries of a Tune ``param_space``, a function of no arguments that
    returns one, or a define-by-run function of a trial (``target``: what it is called).

    Raises:
        TuneSpaceError: ``space`` is none of those, or holds an entry with no Optuna
            distribution.
    """
    if callable(space) and not isinstance(space, Mapping):
        if is_space_function(space):
            return traced(target, space)  # OptunaSearch(space=fn): define-by-run
        space = _called(target, space)
    if not isinstance(space, Mapping):
        raise TuneSpaceError(
            f"'{target}' is {type(space).__name__}, not a Tune param_space (a dict, "
            "or a function of no arguments that returns one)"
        )
    return converted(space)


def holds_tune_domain(value: Any) -> bool:
    """Whether ``value`` (an entry of a dict config's space, from a notebook) is a Tune
    domain (``tune.loguniform(...)``), or a nested dict that holds one: a part of a Tune
    ``param_space``. Read without importing Ray."""
    if type(value).__module__.startswith("ray.tune."):
        return True
    return isinstance(value, Mapping) and any(holds_tune_domain(v) for v in value.values())


def _called(target: str, function: Any) -> Any:
    """What ``function`` (of no arguments) returns: the param_space it builds."""
    try:
        inspect.signature(function).bind()
    except TypeError:
        raise TuneSpaceError(
            f"'{target}' is a function that needs arguments; a param_space function takes "
            "none (or one, a trial, as OptunaSearch(space=...) takes it)"
        ) from None
    except ValueError:
        pass  # no signature to read: let the call say
    try:
        return function()
    except Exception as exc:
        raise TuneSpaceError(f"'{target}()' raised {type(exc).__name__}: {exc}") from None


def converted(space: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``space``'s entries in the ``space`` section's form (nested dicts: dotted names)."""
    from ray.tune.search import sample

    entries: dict[str, Any] = {}
    for key, value in space.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and set(value) == {"grid_search"}:
            entries[name] = _choices(name, "grid_search", value["grid_search"])
        elif isinstance(value, Mapping):
            entries.update(converted(value, prefix=f"{name}."))
        elif isinstance(value, sample.Domain):
            entries[name] = _domain(name, value, sample)
        else:
            entries[name] = {"type": "constant", "value": value}
    return entries


def _domain(name: str, domain: Any, sample: Any) -> Any:
    sampler = domain.get_sampler()
    quantum = None
    if isinstance(sampler, sample.Quantized):
        quantum, sampler = sampler.q, sampler.get_sampler()
    log = isinstance(sampler, sample.LogUniform)
    if isinstance(domain, sample.Categorical):
        return _choices(name, "choice", domain.categories)
    uniform = isinstance(sampler, sample.Uniform | sample.LogUniform)
    if isinstance(domain, sample.Float) and uniform:
        if quantum is not None and log:
            _unstepped(name, "qloguniform", quantum)
            quantum = None
        entry: dict[str, Any] = {
            "type": "float",
            "low": float(domain.lower),
            "high": float(domain.upper),
        }
        return {**entry, **({"log": True} if log else {}), **_step(quantum)}
    if isinstance(domain, sample.Integer) and isinstance(
        sampler, sample.Uniform | sample.LogUniform
    ):
        # randint and lograndint exclude the upper bound; qrandint (qlograndint) includes it.
        high = domain.upper if quantum is not None else domain.upper - 1
        if quantum is not None and log:
            _unstepped(name, "qlograndint", quantum)
            quantum = None
        entry = {"type": "int", "low": int(domain.lower), "high": int(high)}
        return {**entry, **({"log": True} if log else {}), **_step(quantum)}
    kind = type(domain).__name__ if not isinstance(domain, sample.Function) else "sample_from"
    if isinstance(sampler, sample.Normal):
        kind = "randn"
    raise _unknown(name, kind, "tune.uniform, loguniform, quniform, randint, choice or grid_search")


def _choices(name: str, kind: str, values: Any) -> list[Any]:
    """A choice's values, each one Optuna stores: a number, a string, a boolean or None.

    Raises:
        TuneSpaceError: a value of another type (a list, a dict, a class), naming it.
    """
    choices = list(values)
    for value in choices:
        if value is not None and not isinstance(value, bool | int | float | str):
            raise TuneSpaceError(
                f"param_space['{name}'] is tune.{kind} of a {type(value).__name__} "
                f"({value!r:.60}); Optuna's choices are numbers, strings, booleans or None: "
                f"choose among names (tune.{kind}(['small', 'large'])) and look the value up "
                "in the trainable"
            )
    return choices


def _unstepped(name: str, kind: str, quantum: float) -> None:
    """No step for a quantized log domain, said as a :class:`TuneSpaceWarning`."""
    plain = kind.removeprefix("q")
    warnings.warn(
        TuneSpaceWarning(
            f"param_space['{name}'] is tune.{kind}: Optuna cannot step a log scale, so it is "
            f"searched as tune.{plain}, without the step {quantum:g} (as Ray Tune's "
            f"OptunaSearch does); write tune.{plain} to say so"
        ),
        stacklevel=2,
    )


def _step(quantum: float | None) -> dict[str, Any]:
    return {"step": quantum} if quantum is not None else {}  # an int for an int domain


def _unknown(name: str, kind: str, instead: str) -> TuneSpaceError:
    return TuneSpaceError(
        f"param_space['{name}'] is tune.{kind}, which has no Optuna distribution; use {instead}"
    )
