"""Building an Optuna class from a config's ``options``, with one-line errors."""

from __future__ import annotations

import collections.abc
import difflib
import inspect
import re
import sys
import typing
import warnings
from collections.abc import Callable
from typing import Any

from optuna.exceptions import ExperimentalWarning
from pydantic import ConfigDict, TypeAdapter, ValidationError

from hpsearch.errors import ConfigError


def construct_checked(
    factory: Callable[..., Any], kwargs: dict[str, Any], key: str, source: str
) -> Any:
    """``factory(**kwargs)``; unknown or rejected options are a one-line :class:`ConfigError`."""
    name = getattr(factory, "__name__", str(factory))
    accepted = parameters(factory)
    for option in kwargs:
        if option not in accepted:
            close = difflib.get_close_matches(option, accepted, n=1)
            raise ConfigError(
                source,
                f"{key}.options.{option}",
                f"{name} takes no option '{option}'",
                f"did you mean '{close[0]}'?" if close else f"valid options: {', '.join(accepted)}",
            )
    for option, value in list(kwargs.items()):
        kwargs[option] = _checked(factory, option, value, f"{key}.options.{option}", source)
    needed = [n for n in required(factory) if n not in kwargs]
    if needed:
        raise ConfigError(
            source,
            f"{key}.options",
            f"{name} needs the option(s) {', '.join(needed)}",
            f"give them, e.g. options: {{{needed[0]}: ...}}",
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            return factory(**kwargs)
    except ImportError as exc:
        raise ConfigError(
            source, key, f"{name} needs a package that is not installed: {exc}", "pip install it"
        ) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            source,
            f"{key}.options",
            f"{name} rejected the options: {exc}",
            f"check each against {name}'s documentation",
        ) from None


def parameters(factory: Callable[..., Any]) -> list[str]:
    """The names ``factory`` takes by keyword."""
    return [
        p.name
        for p in inspect.signature(factory).parameters.values()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]


def required(factory: Callable[..., Any]) -> list[str]:
    """The names ``factory`` needs by keyword: those without a default."""
    return [
        p.name
        for p in inspect.signature(factory).parameters.values()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]


_STRICT = ConfigDict(arbitrary_types_allowed=True, strict=True)
"""An option's value checked as its annotation says, with no coercion: ``"3"`` is no int
(the class would compare it with numbers at its first trial), and a class is checked
with ``isinstance``."""


def _checked(factory: Callable[..., Any], option: str, value: Any, key: str, source: str) -> Any:
    """``value``, where the class's annotation of ``option`` takes it (a whole number
    written as a float, ``60.0``, as the int it is), or where that annotation cannot be
    read (not every class's can: one it does not name at run time is left to the class).

    Raises:
        ConfigError: naming ``key``, the type it takes and the value given.
    """
    hint = _annotation(factory, option)
    if hint is None:
        return value
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(hint, config=_STRICT)
    except Exception:  # a type pydantic cannot check (a protocol, a type variable)
        return value
    candidates = [value]
    if isinstance(value, float) and value.is_integer():
        candidates.append(int(value))  # NNI's R: 60.0, for Optuna's int max_resource
    for candidate in candidates:
        try:
            adapter.validate_python(candidate)
        except ValidationError:
            continue
        return candidate
    name = getattr(factory, "__name__", str(factory))
    wanted = _readable(hint)
    fix = f"give {wanted}"
    if typing.get_origin(hint) is collections.abc.Callable:
        fix = "name a function, as module:function"
    elif not _plain(hint):  # an object YAML cannot write
        fix = "leave it out, or give the object itself in a dict config (hpsearch.run({...}))"
    raise ConfigError(source, key, f"{name} takes {wanted} for '{option}', not {value!r}", fix)


def _plain(hint: Any) -> bool:
    """Whether a config file can write a value of ``hint``: numbers, text, lists, mappings."""
    arguments = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Literal:
        return True
    if arguments and not isinstance(hint, type):
        origin = typing.get_origin(hint)
        generic = origin is not None and origin not in (typing.Union, type(int | None))
        if generic and getattr(origin, "__module__", "") not in _PLAIN_MODULES:
            return False
        return all(a is Ellipsis or _plain(a) for a in arguments)
    return hint is type(None) or getattr(hint, "__module__", "") in ("builtins", "typing")


_PLAIN_MODULES = ("builtins", "collections.abc", "typing")
"""Where the generic types a config can write come from (``list``, ``Sequence``, ``dict``)."""


def _annotation(factory: Callable[..., Any], option: str) -> Any:
    """The type ``factory`` annotates ``option`` with, evaluated (``None``: none, or one
    that names what its module imports only for type checkers)."""
    try:
        parameter = inspect.signature(factory).parameters.get(option)
    except (TypeError, ValueError):
        return None
    if parameter is None or parameter.annotation is parameter.empty:
        return None
    annotation = parameter.annotation
    if not isinstance(annotation, str):  # annotations evaluated already
        return annotation
    target = getattr(factory, "__init__", factory) if isinstance(factory, type) else factory
    module = sys.modules.get(getattr(target, "__module__", "") or "")
    namespace = {**vars(typing), **vars(collections.abc), **(vars(module) if module else {})}
    try:
        return eval(annotation, namespace)  # the class's own annotation, as typing evaluates it
    except Exception:
        return None


def _readable(hint: Any) -> str:
    """A type as its user reads it: ``int``, ``BaseSampler | None``, ``Sequence[float]``."""
    if isinstance(hint, type):
        return hint.__name__
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", str(hint)).replace(
        "NoneType", "None"
    )
