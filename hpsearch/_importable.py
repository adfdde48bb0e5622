"""The user's project on ``sys.path``, as ``python -m`` puts the working directory there, and
the import of the user's modules, as a plain ``import`` would run them."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
from types import ModuleType


def ensure_importable_from(directory: str) -> None:
    """Put ``directory`` first on ``sys.path``, as ``python -m`` does for the working directory.

    The ``hpsearch`` console script runs with its own folder on ``sys.path``, not
    the user's project, so ``mypkg.train:train`` would not import without this.
    """
    directory = os.path.abspath(directory)
    if directory not in sys.path:
        sys.path.insert(0, directory)


class ModuleExited(Exception):
    """The user's module called ``sys.exit`` while it was imported (an ``argparse`` at its
    top level whose required arguments are missing, for one).

    Attributes:
        what: what happened, with the last line the module wrote to stderr.
        fix: how to write the module instead.
    """

    fix = (
        "its top-level code parses a command line or exits: move it under "
        'if __name__ == "__main__":, or run the script with its flags as train: {command: ...}'
    )

    def __init__(self, module_name: str, code: object, said: str) -> None:
        self.what = f"importing '{module_name}' exited" + (f": {said}" if said else f" ({code!r})")
        super().__init__(f"{self.what}; {self.fix}")


def import_user_module(module_name: str) -> ModuleType:
    """Import the user's module with a command line of no arguments.

    A training script's module often parses its flags at its top level (``args =
    parser.parse_args()``). Imported by hpsearch's driver it would parse ``hpsearch run
    CONFIG``, and in a Ray worker Ray's own flags; under Ray Tune it runs once, in the
    user's driver, with the user's flags. Here it sees none: its parser's defaults,
    as ``python script.py`` with no flags gives. What it writes to stderr while it is
    imported is passed on, unless it exits.

    Raises:
        ModuleExited: its top-level code exited (argparse's missing required flags),
            with the last line it wrote to stderr.
    """
    if module_name in sys.modules:
        return sys.modules[module_name]
    saved_argv = sys.argv
    said = io.StringIO()
    sys.argv = [module_name]  # argparse's prog: the module's name in its usage line
    try:
        with contextlib.redirect_stderr(said):
            module = importlib.import_module(module_name)
    except SystemExit as exc:
        lines = [line.strip() for line in said.getvalue().splitlines() if line.strip()]
        raise ModuleExited(module_name, exc.code, lines[-1] if lines else "") from None
    except BaseException:
        sys.stderr.write(said.getvalue())
        raise
    finally:
        sys.argv = saved_argv
    sys.stderr.write(said.getvalue())
    return module
