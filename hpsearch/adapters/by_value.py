"""A function given as itself (``hpsearch.run({"train": train, ...})`` in a notebook),
named for the config and, where no worker could import it by that name, sent by value.

A config file names its functions (``mymod:train``), and each trial's worker imports
them. A dict can hold the function itself. One that a worker can import by its name
(defined at a module's top level, that module not ``__main__``) is named so, and runs
exactly as if the file had named it. One defined in a notebook, in the script that
was started (``__main__``) or inside another function cannot be imported by a worker:
it is pickled with cloudpickle, as Ray Tune ships a trainable defined there, and each
worker unpickles it. Its name (``__main__:train``) is only what the config, the study
and the errors call it.

The pickles are kept by name in this process (:func:`named_function`), and travel to the
workers in the trial settings (:func:`pickles_of`, :func:`install_pickles`).
"""

from __future__ import annotations

import base64
import importlib
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from hpsearch.errors import ConfigError
from hpsearch.trial.other_tools import TARGET_PATTERN

LARGE_BYTES = 16 * 1024 * 1024
"""A pickle this large (a dataset the function reads from the notebook's globals, say)
travels with every trial: said once, with the way to keep it small."""

_BY_VALUE: dict[str, tuple[Callable[..., Any], bytes]] = {}
"""This process's functions sent by value, by the name the config gives them."""


def named_function(function: Callable[..., Any], source: str, key: str) -> str:
    """The name the config gives ``function``: ``module:name`` where a worker can import it
    so, or a name under which it is sent by value (registered here).

    Raises:
        ConfigError: ``function`` cannot be pickled (it holds a lock, an open file or a
            GPU tensor, say): naming the key, the reason, and a module to define it in.
    """
    module = str(getattr(function, "__module__", None) or "__main__")
    qualname = str(getattr(function, "__qualname__", None) or getattr(function, "__name__", ""))
    spec = f"{module}:{qualname}"
    if module != "__main__" and _imports_as(function, module, qualname):
        return spec
    if not re.fullmatch(TARGET_PATTERN, spec):
        # A lambda, or a function defined inside another: a name a config could hold.
        spec = f"{module}:{re.sub(r'[^0-9A-Za-z_]+', '_', qualname).strip('_') or 'function'}"
        spec = spec if re.fullmatch(TARGET_PATTERN, spec) else "__main__:function"
    import cloudpickle  # type: ignore[import-untyped]  # no stubs

    name = str(getattr(function, "__name__", None) or "function")
    try:
        pickled = cloudpickle.dumps(function)
    except Exception as exc:
        raise ConfigError(
            source,
            key,
            f"'{name}' cannot be sent to the trials' workers "
            f"(cloudpickle: {type(exc).__name__}: {exc})",
            "create what it holds inside it, or define it in a module and name it, "
            f"e.g. 'mymodule:{name}'",
        ) from None
    if len(pickled) > LARGE_BYTES:
        warnings.warn(
            f"{source}: {key}: '{name}' is {len(pickled) / 2**20:.0f} MiB pickled, sent with "
            "every trial: load its data inside it rather than from the notebook's globals",
            stacklevel=2,
        )
    _BY_VALUE[spec] = (function, pickled)
    return spec


def _imports_as(function: Callable[..., Any], module: str, qualname: str) -> bool:
    """Whether importing ``module`` and reading ``qualname`` gives ``function`` back."""
    if "<" in qualname:
        return False
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:  # any failure to import means: not by name
        return False
    return found is function


def sent_by_value(spec: str) -> Callable[..., Any] | None:
    """The function sent by value under ``spec``; ``None``: ``spec`` is imported by name."""
    entry = _BY_VALUE.get(spec)
    return None if entry is None else entry[0]


def pickles_of(specs: Iterable[str]) -> dict[str, str]:
    """The pickles of those of ``specs`` sent by value, in base64 (the trial settings
    travel as JSON): what the workers install."""
    return {
        spec: base64.b64encode(_BY_VALUE[spec][1]).decode("ascii")
        for spec in specs
        if spec in _BY_VALUE
    }


def install_pickles(pickled: Mapping[str, str]) -> None:
    """Unpickle (once per process) the functions a worker's settings carry by value."""
    import cloudpickle

    for spec, text in pickled.items():
        data = base64.b64decode(text)
        known = _BY_VALUE.get(spec)
        if known is None or known[1] != data:
            _BY_VALUE[spec] = (cloudpickle.loads(data), data)
