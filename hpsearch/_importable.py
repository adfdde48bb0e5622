"""The user's project on ``sys.path``, as ``python -m`` puts the working directory there, and
the import of the user's modules, as a plain ``import`` would run them."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
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


def shadowing(directory: str) -> list[tuple[str, str, str]]:
    """The modules of ``directory`` named as a module of Python's own that this process
    imported from elsewhere: each as (its file or folder, the module's name, where the
    imported one lives).

    A Ray worker has the project's folder first on its path (``PYTHONPATH``), as
    ``python -m`` has, and imports Ray before any trial runs: a project's ``cmd.py`` or
    ``code.py`` is then what ``import ray`` gets for ``pdb``'s ``import cmd`` and
    ``import code``, and the worker never starts (Ray retries it for minutes). A module
    built into Python or frozen (``sys``, ``os``) is found before the path, so it is
    never shadowed. Only Python's own modules are named: a project's package that is
    also installed (``pip install .``) and imported from there is the same code.
    """
    folder = Path(directory).resolve()
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    found: list[tuple[str, str, str]] = []
    for entry in entries:
        name = _module_name(entry)
        module = sys.modules.get(name) if name in sys.stdlib_module_names else None
        spec = getattr(module, "__spec__", None)
        origin = getattr(spec, "origin", None)
        if not origin or origin in {"built-in", "frozen"} or name == "__main__":
            continue
        if not Path(origin).resolve().is_relative_to(folder):  # not the project's own
            found.append((entry.name, name, origin))
    return found


def _module_name(entry: Path) -> str:
    """The module ``import`` would find at ``entry`` in a folder on the path; empty: none."""
    if entry.is_dir():
        name = entry.name if (entry / "__init__.py").is_file() else ""
    elif entry.name.endswith(".py"):
        name = entry.name[:-3]
    else:
        suffix = next((s for s in EXTENSION_SUFFIXES if entry.name.endswith(s)), None)
        name = entry.name[: -len(suffix)] if suffix else ""
    return name if name.isidentifier() else ""
