"""Building an Optuna class from a config's ``options``, with one-line errors."""

from __future__ import annotations

import difflib
import inspect
import warnings
from collections.abc import Callable
from typing import Any

from optuna.exceptions import ExperimentalWarning

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
