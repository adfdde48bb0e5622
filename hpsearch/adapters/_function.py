"""Finding the user's training function from its ``package.module:function`` name, or the
program of a training script."""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import inspect
import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch._importable import ModuleExited, import_user_module
from hpsearch.adapters.by_value import sent_by_value
from hpsearch.adapters.forms import (
    form_in_source,
    form_of,
    is_class_trainable,
    module_source,
    refused_on_import,
    wrong_form,
)
from hpsearch.errors import ConfigError
from hpsearch.trial.script import activated_path

if TYPE_CHECKING:
    from hpsearch.trial.script import CommandSpec

TrainFunction = Callable[..., Any]
"""``train(params: dict, ctx: TrialContext) -> None | float | dict``."""


def resolve_train_function(
    spec: str,
    *,
    source: str = "<config>",
    key: str = "train",
    members: bool = False,
    objective: bool = False,
    trainable: bool = False,
) -> TrainFunction:
    """Import ``package.module:function`` (or take the function sent by value under that
    name) and check it can be called as ``train(params, ctx)``
    (or, with ``members``, as ``train(members)``: a fused group's function).

    Args:
        spec: the ``train`` value of a config.
        source: the config file, for error messages.
        key: the config key that names it (``train``, or ``fusion.train``).
        members: whether it trains fused members (one argument) instead of one trial.
        objective: whether it is an Optuna objective (one argument: the trial).
        trainable: whether it is a Ray Tune function trainable (one argument: the config).

    Raises:
        ConfigError: naming ``key``, what went wrong and how to fix it.
    """
    function = sent_by_value(spec)
    if function is None:
        function = _imported(spec, source, key)
    if trainable and is_class_trainable(function):
        train_class: TrainFunction = function
        return train_class  # Tune constructs it with the config, as hpsearch's adapter does
    _refuse_class_trainable(function, spec, source, key)
    _check_callable(
        function, spec, source, key, members=members, objective=objective, trainable=trainable
    )
    train: TrainFunction = function
    return train


def user_function(spec: str, source: str, key: str) -> Callable[..., Any]:
    """The function ``package.module:function`` names (or the one a dict config sent under
    that name), imported as a training function is: for an option an Optuna class takes
    as a function (a sampler's ``constraints_func``).

    Raises:
        ConfigError: naming ``key``: it does not import, or names nothing callable.
    """
    function = sent_by_value(spec)
    found: Callable[..., Any] = function if function is not None else _imported(spec, source, key)
    return found


def _imported(spec: str, source: str, key: str) -> Any:
    """What ``package.module:function`` names, imported; a callable.

    Raises:
        ConfigError: it does not import, or names nothing callable.
    """
    module_name, attribute = _named(spec, source, key)
    _refuse_search_on_import(module_name, source, key)
    try:
        module = import_user_module(module_name)
    except ModuleExited as exc:
        raise ConfigError(source, key, exc.what, exc.fix) from None
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(
                source,
                key,
                f"cannot import module '{module_name}' (no module named '{exc.name}')",
                _missing_module_fix(
                    exc.name,
                    spec,
                    "run hpsearch from the directory that holds the package, or pip install it",
                ),
            ) from None
        raise ConfigError(
            source,
            key,
            f"importing '{module_name}' failed: {type(exc).__name__}: {exc}",
            _missing_module_fix(exc.name or "", spec, "install the missing dependency"),
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
    return function


def _named(spec: str, source: str, key: str) -> tuple[str, str]:
    """The module and the function ``spec`` names, where a worker can import them.

    Raises:
        ConfigError: ``spec`` is not ``package.module:function``, or names ``__main__``.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(
            source,
            key,
            f"'{spec}' is not of the form package.module:function",
            "e.g. mypkg.train:train",
        )
    if module_name == "__main__":
        raise ConfigError(source, key, *_not_main(attribute))
    return module_name, attribute


def _not_main(attribute: str) -> tuple[str, str]:
    """The problem and fix of a function named in ``__main__``: the program that was started
    (a script that calls ``hpsearch.run``, or the ``hpsearch`` command), which each trial's
    worker (Ray's) is not."""
    started = getattr(sys.modules.get("__main__"), "__file__", None)
    script = Path(started) if started and started.endswith(".py") else None
    if script is not None and script.stem == "__main__":
        script = None  # python -m a package (hpsearch, pytest): no script of the user's
    problem = (
        f"'__main__:{attribute}' names the program that was started"
        + (f" ({script})" if script is not None else "")
        + ", which each trial's worker does not run (its __main__ is Ray's)"
    )
    if script is not None:
        return problem, f"name the script's module: '{script.stem}:{attribute}'"
    return problem, (
        f"name the module that defines '{attribute}', e.g. 'mymodule:{attribute}', or give "
        f"the function itself in a dict config: hpsearch.run({{..., 'train': {attribute}}})"
    )


def _refuse_search_on_import(module_name: str, source: str, key: str) -> None:
    """Refuse, before it is imported, a module that runs a search of its own when imported.

    Raises:
        ConfigError: naming the call and its line, with the fix.
    """
    refused = refused_on_import(module_name)
    if refused is not None:
        raise ConfigError(source, key, *refused)


def _refuse_class_trainable(function: Callable[..., Any], spec: str, source: str, key: str) -> None:
    """Refuse a subclass of Ray Tune's ``Trainable`` named where a function is called: run
    as one, it would only be constructed, and every trial would fail without a report.

    Raises:
        ConfigError: ``function`` is a class trainable, with the line to write instead.
    """
    if is_class_trainable(function):
        given = sent_by_value(spec) is not None  # a dict config holds the class itself
        raise ConfigError(
            source,
            key,
            f"'{spec}' is a class trainable (tune.Trainable), which train calls as a function",
            f'write "train": {{"tune": {spec.partition(":")[2]}}}'
            if given
            else f"write train: {{tune: {spec}}}",
        )


def _check_callable(
    function: Callable[..., Any],
    spec: str,
    source: str,
    key: str,
    *,
    members: bool,
    objective: bool,
    trainable: bool,
) -> None:
    """Check ``function`` can be called as its form of ``train`` calls it.

    Raises:
        ConfigError: it cannot (the signature it needs), or its code shows it written for
            another form (the ``train:`` line to write).
    """
    arguments: tuple[None, ...] = (None, None)
    usage, fix = "train(params, ctx)", "give it two positional parameters: def train(params, ctx)"
    one_argument = [
        (members, "train(members)", "train_members(members)"),
        (objective, "objective(trial)", "objective(trial)"),
        (trainable, "train_fn(config)", "train_fn(config)"),
    ]
    for wanted, call, definition in one_argument:
        if wanted:
            arguments, usage = (None,), call
            fix = f"give it one positional parameter: def {definition}"
    try:
        inspect.signature(function).bind(*arguments)
        fits = True
    except TypeError:
        fits = False
    except ValueError:  # no signature available (some builtins); let the call decide
        fits = True
    if not members:
        # Written for another form of `train:`: the error gives the line to write.
        form = form_of(function)
        kind = "optuna" if objective else "tune" if trainable else "function"
        if form is not None and form.kind != kind and (form.strong or not fits):
            raise ConfigError(source, key, *wrong_form(spec, form))
    if not fits:
        raise ConfigError(source, key, f"'{spec}' cannot be called as {usage}", fix)


def check_train(
    train: str,
    command: CommandSpec | None,
    source: str,
    *,
    run_module: bool = True,
    objective: str | None = None,
    trainable: str | None = None,
    space: Collection[str] = (),
) -> None:
    """Check a config's ``train``: the function imports, or the script's program is found
    (and, for a ``python`` script, that it gets the trial's parameters).

    Args:
        train: the training function, ``package.module:function`` (ignored with ``command``).
        command: the training script, when ``train`` is one.
        source: the config file, for messages.
        run_module: import the function's module; else read its source where that tells
            enough (``hpsearch validate``: no torch to learn that a function exists).
        objective: the Optuna objective of ``train: {optuna: ...}`` (then ``train`` is empty).
        trainable: the Ray Tune trainable of ``train: {tune: ...}`` (then ``train`` is empty).
        space: the names of the searched parameters (not the constants): a script must be
            given them.

    Raises:
        ConfigError: naming ``train``, what is missing and how to fix it.
    """
    if objective is not None:
        resolve_train_function(objective, source=source, key="train.optuna", objective=True)
        return
    if trainable is not None:  # train_fn(config): one argument, as an objective takes
        resolve_train_function(trainable, source=source, key="train.tune", trainable=True)
        return
    if command is None:
        if run_module or not _checked_from_source(train, source):
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
    elif shutil.which(program, path=activated_path(os.environ.get("PATH"))) is None:
        raise ConfigError(
            source,
            "train.command",
            f"program '{program}' is not on PATH",
            "install it, or give its path",
        )
    script = _python_script(command.arguments)
    if script is not None and not os.path.isfile(script):
        # Else every trial fails with Python's "can't open file", and the search with them.
        raise ConfigError(
            source,
            "train.command",
            f"Python's script '{script}' is not there (from {os.getcwd()})",
            "give its path from the directory hpsearch runs in",
        )
    if script is not None and space:
        _check_parameters_passed(command.arguments, script, space, source)


READS_ITS_ENVIRONMENT = (
    "HPSEARCH_PARAMS",
    "environ",
    "getenv",
    "get_next_parameter",
    "wandb.config",
    "wandb.init",
)
"""What the source of a script that may take its parameters from its environment has (NNI's
``nni.get_next_parameter()`` and the config of W&B's ``wandb.init()`` read them there:
:mod:`hpsearch.adapters.trial_apis`)."""
MOST_SOURCES_READ = 200
"""How many files of a script and the modules of its folder it imports are read at most."""


def _check_parameters_passed(
    arguments: Sequence[str], script: str, space: Collection[str], source: str
) -> None:
    """Refuse a ``python SCRIPT`` command that gives a trial's parameters nowhere: it names
    none (``{args}``, ``{name}``, ``$HPSEARCH_PARAMS``), and the script reads no
    environment variable (``HPSEARCH_PARAMS`` is where they would be). Every trial would
    run alike, on the script's defaults, and the sampler would learn nothing from them."""
    for argument in arguments:
        if "{" in argument.replace("{{", "") or "HPSEARCH_PARAMS" in argument:
            return
    if _reads_its_environment(Path(script)):
        return
    first = next(iter(space))
    raise ConfigError(
        source,
        "train.command",
        f"{shlex.join(arguments)} names none of the space's parameters ({{args}}, "
        f"{{{first}}}), and {script} reads no environment variable (HPSEARCH_PARAMS): "
        "every trial would run alike, on the script's defaults",
        f"add {{args}} (one --name=value per parameter): command: {shlex.join(arguments)} "
        "{args} (a script that reads them through an installed package: name HPSEARCH_PARAMS "
        "in a comment of the script)",
    )


def _reads_its_environment(script: Path) -> bool:
    """Whether ``script``, or a module of its folder it imports (and so on), may read its
    environment (:data:`READS_ITS_ENVIRONMENT` in its source); ``True`` where unsure."""
    queue, seen = [script], {script}
    while queue:
        if len(seen) > MOST_SOURCES_READ:
            return True
        source = queue.pop()
        try:
            text = source.read_text(encoding="utf-8", errors="replace")
            tree = ast.parse(text)
        except (OSError, SyntaxError, ValueError):
            return True
        if any(word in text for word in READS_ITS_ENVIRONMENT):
            return True
        for found in _local_imports(tree, script.parent, source.parent):
            if found not in seen:
                seen.add(found)
                queue.append(found)
    return False


def _local_imports(tree: ast.AST, folder: Path, here: Path) -> Iterator[Path]:
    """The project's files that ``tree`` imports: from ``folder`` (the script's, first on
    its path), the folder hpsearch runs in and its ``src`` (a project installed from
    there), and from ``here`` (the importing file's folder) what it imports relatively."""
    project = [folder, Path.cwd(), Path.cwd() / SOURCE_FOLDER]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names, roots = [alias.name for alias in node.names], project
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            roots = project if not node.level else [here]
            names = [module] if module else []
            names += [f"{module}.{alias.name}".lstrip(".") for alias in node.names]
        else:
            continue
        for name in names:
            for root in roots:
                base = root.joinpath(*name.split("."))
                for found in (base.with_suffix(".py"), base / "__init__.py"):
                    if found.is_file():
                        yield found


_PYTHON = re.compile(r"python[\d.]*")
"""A Python interpreter's name: ``python``, ``python3``, ``python3.11``."""
_TAKES_A_VALUE = ("-W", "-X", "--check-hash-based-pycs")
"""Python's options whose value is the next argument (``-W ignore``)."""


def _python_script(arguments: Sequence[str]) -> str | None:
    """The script a ``python [options] SCRIPT ...`` command runs (``None``: another program,
    ``-m``/``-c``, or a script that is a parameter)."""
    if not _PYTHON.fullmatch(os.path.basename(arguments[0])):
        return None
    rest = iter(arguments[1:])
    for argument in rest:
        if argument.startswith(("-m", "-c")) or argument == "-":
            return None
        if argument in _TAKES_A_VALUE:
            next(rest, None)
        elif not argument.startswith("-"):
            return None if "{" in argument else argument
    return None


SOURCE_FOLDER = "src"
"""Where a project of the ``src`` layout keeps its packages (they import once installed)."""


def _missing_module_fix(missing: str, spec: str, otherwise: str) -> str:
    """What to do about module ``missing`` that ``spec`` needed: where it is a package of
    the ``src`` layout here (``src/mypkg``), install the project, or put ``src`` on the path."""
    top = missing.partition(".")[0]
    held = Path(SOURCE_FOLDER, top)
    if not top or not (held.is_dir() or held.with_suffix(".py").is_file()):
        return otherwise
    name = spec.removeprefix(f"{SOURCE_FOLDER}.")
    named = f"name it '{name}' and " if name != spec else ""
    return (
        f"{named}install the project ({SOURCE_FOLDER}/{top} is a src layout's package): pip "
        f"install -e . here, or run with PYTHONPATH={SOURCE_FOLDER}"
    )


def _checked_from_source(spec: str, source: str) -> bool:
    """Check ``train`` from its module's source, without running it; whether that sufficed.

    ``hpsearch validate`` should not pay for torch to learn that ``train(params,
    ctx)`` exists. The module is found (not imported), parsed, and each package
    it imports at its top level must be installed; the function must be a
    top-level ``def``, undecorated, that takes two positional arguments. Anything
    the source cannot tell (a decorated or re-exported function, a compiled
    module) answers ``False``, and the caller imports the module as a run would.

    Raises:
        ConfigError: as :func:`resolve_train_function` would, for what the source shows.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        return False
    tree = module_source(module_name)
    if tree is None:
        return False  # nothing to read here: the import says what is wrong, or works
    for name in _top_level_imports(tree):
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            raise ConfigError(
                source,
                "train",
                f"importing '{module_name}' failed: ModuleNotFoundError: No module named '{name}'",
                _missing_module_fix(name, spec, "install the missing dependency"),
            )
    defined = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == attribute
    ]
    if len(defined) != 1 or defined[0].decorator_list or _assigned(tree, attribute):
        return False
    arguments = defined[0].args
    positional = [*arguments.posonlyargs, *arguments.args]
    required = len(positional) - len(arguments.defaults)
    keyword_required = any(d is None for d in arguments.kw_defaults)
    takes_two = required <= 2 and (len(positional) >= 2 or arguments.vararg is not None)
    form = form_in_source(spec)
    if form is not None and form.kind != "function" and (form.strong or not takes_two):
        raise ConfigError(source, "train", *wrong_form(spec, form))
    if not takes_two or keyword_required:
        raise ConfigError(
            source,
            "train",
            f"'{spec}' cannot be called as train(params, ctx)",
            "give it two positional parameters: def train(params, ctx)",
        )
    return True


def _top_level_imports(tree: ast.Module) -> list[str]:
    """The packages a module imports when it loads (not those imported inside functions)."""
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.extend(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.partition(".")[0])
    return [name for name in dict.fromkeys(names) if name != "__future__"]


def _assigned(tree: ast.Module, name: str) -> bool:
    """Whether the module also binds ``name`` another way (the last binding would win)."""
    for node in tree.body:
        bound: list[str] = []
        if isinstance(node, ast.Assign):
            bound = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound = [alias.asname or alias.name for alias in node.names]
        elif isinstance(node, ast.ClassDef):
            bound = [node.name]
        if name in bound:
            return True
    return False


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
    from hpsearch.adapters._members import shared_of

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
