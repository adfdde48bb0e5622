"""Finding the user's training function from its ``package.module:function`` name, or the
program of a training script."""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import shutil
import sys
from collections.abc import Callable
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


def resolve_train_function(spec: str, *, source: str = "<config>") -> TrainFunction:
    """Import ``package.module:function`` and check it can be called as ``train(params, ctx)``.

    Args:
        spec: the ``train`` value of a config.
        source: the config file, for error messages.

    Raises:
        ConfigError: naming ``train``, what went wrong and how to fix it.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(
            source,
            "train",
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
            "train",
            f"importing '{module_name}' failed: {type(exc).__name__}: {exc}",
            "install the missing dependency",
        ) from None
    except Exception as exc:
        raise ConfigError(
            source,
            "train",
            f"importing '{module_name}' raised {type(exc).__name__}: {exc}",
            f"fix the error in {module_name}",
        ) from None

    function = getattr(module, attribute, None)
    if function is None:
        candidates = [name for name, value in vars(module).items() if callable(value)]
        close = difflib.get_close_matches(attribute, candidates, n=1)
        fix = f"did you mean '{module_name}:{close[0]}'?" if close else "check the function name"
        raise ConfigError(source, "train", f"module '{module_name}' has no '{attribute}'", fix)
    if not callable(function):
        raise ConfigError(
            source,
            "train",
            f"'{spec}' is a {type(function).__name__}, not a function",
            "name a function",
        )
    try:
        inspect.signature(function).bind(None, None)
    except TypeError:
        raise ConfigError(
            source,
            "train",
            f"'{spec}' cannot be called as train(params, ctx)",
            "give it two positional parameters: def train(params, ctx)",
        ) from None
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
