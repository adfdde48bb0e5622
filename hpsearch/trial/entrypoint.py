"""Finding the user's training function from its ``package.module:function`` name, or the
program of a training script."""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import shutil
import sys
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from hpsearch.errors import ConfigError

if TYPE_CHECKING:
    from hpsearch.trial.script import CommandSpec

TrainFunction = Callable[..., Any]
"""``train(params: dict, ctx: TrialContext) -> None | float | dict``."""


def ensure_importable_from(directory: str) -> None:
    """Put ``directory`` first on ``sys.path``, as ``python -m`` does for the working directory.

    The ``hpsearch`` console script runs with its own folder on ``sys.path``, not
    the user's project, so ``mypkg.train:train`` would not import without this.
    """
    directory = os.path.abspath(directory)
    if directory not in sys.path:
        sys.path.insert(0, directory)


def resolve_train_function(
    spec: str, *, source: str = "<config>", key: str = "train", members: bool = False
) -> TrainFunction:
    """Import ``package.module:function`` and check it can be called as ``train(params, ctx)``
    (or, with ``members``, as ``train(members)``: a fused group's function).

    Args:
        spec: the ``train`` value of a config.
        source: the config file, for error messages.
        key: the config key that names it (``train``, or ``fusion.train``).
        members: whether it trains fused members (one argument) instead of one trial.

    Raises:
        ConfigError: naming ``key``, what went wrong and how to fix it.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(
            source,
            key,
            f"'{spec}' is not of the form package.module:function",
            "e.g. mypkg.train:train",
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(
                source,
                "train",
                f"cannot import module '{module_name}' (no module named '{exc.name}')",
                "run hpsearch from the directory that holds the package, or pip install it",
            ) from None
        raise ConfigError(
            source,
            key,
            f"importing '{module_name}' failed: {type(exc).__name__}: {exc}",
            "install the missing dependency",
        ) from None
    except Exception as exc:
        raise ConfigError(
            source,
            key,
            f"importing '{module_name}' raised {type(exc).__name__}: {exc}",
            f"fix the error in {module_name}",
        ) from None

    function = getattr(module, attribute, None)
    if function is None:
        candidates = [name for name, value in vars(module).items() if callable(value)]
        close = difflib.get_close_matches(attribute, candidates, n=1)
        fix = f"did you mean '{module_name}:{close[0]}'?" if close else "check the function name"
        raise ConfigError(source, key, f"module '{module_name}' has no '{attribute}'", fix)
    if not callable(function):
        raise ConfigError(
            source,
            key,
            f"'{spec}' is a {type(function).__name__}, not a function",
            "name a function",
        )
    arguments, usage = (
        ((None,), "train(members)") if members else ((None, None), "train(params, ctx)")
    )
    try:
        inspect.signature(function).bind(*arguments)
    except TypeError:
        fix = (
            "give it one positional parameter: def train_members(members)"
            if members
            else "give it two positional parameters: def train(params, ctx)"
        )
        raise ConfigError(source, key, f"'{spec}' cannot be called as {usage}", fix) from None
    except ValueError:  # no signature available (some builtins); let the call decide
        pass
    train: TrainFunction = function
    return train


def check_train(train: str, command: CommandSpec | None, source: str) -> None:
    """Check a config's ``train``: the function imports, or the script's program is found.

    Args:
        train: the training function, ``package.module:function`` (ignored with ``command``).
        command: the training script, when ``train`` is one.
        source: the config file, for messages.

    Raises:
        ConfigError: naming ``train``, what is missing and how to fix it.
    """
    if command is None:
        resolve_train_function(train, source=source)
        return
    program = command.arguments[0]
    if "{" in program:
        return  # the program itself is a parameter: known per trial
    if os.sep in program:
        if not os.access(program, os.X_OK):
            raise ConfigError(
                source,
                "train.command",
                f"'{program}' is not an executable file (from {os.getcwd()})",
                "give its path from the directory hpsearch runs in, and chmod +x it",
            )
    elif shutil.which(program) is None:
        raise ConfigError(
            source,
            "train.command",
            f"program '{program}' is not on PATH",
            "install it, or give its path",
        )


def check_fusion(
    train: str, shared: Sequence[str] | None, space: Collection[str], source: str
) -> tuple[str, ...]:
    """Check ``fusion``: its function takes members; the parameters they share; return those.

    Args:
        train: ``fusion.train``.
        shared: ``fusion.shared`` (``None``: what the function declares with ``hpsearch.fused``).
        space: the names of the search's parameters.
        source: the config file, for messages.

    Raises:
        ConfigError: naming the key, what is wrong and how to fix it.
    """
    from hpsearch.trial.members import shared_of

    function = resolve_train_function(train, source=source, key="fusion.train", members=True)
    names = tuple(shared) if shared is not None else shared_of(function)
    if names is None:
        raise ConfigError(
            source,
            "fusion.shared",
            f"'{train}' declares no shared parameters",
            "decorate it with @hpsearch.fused(shared=[...]), or list fusion.shared",
        )
    unknown = [name for name in names if name not in space]
    if shared is not None and unknown:
        raise ConfigError(
            source,
            "fusion.shared",
            f"{unknown} are not parameters of the space",
            f"name parameters of space: {sorted(space)}",
        )
    return names
