"""Which form of ``train:`` a function is written for, read from its code without running it.

hpsearch calls three kinds of function, each named by a form of ``train`` of its own:

- a training function ``train(params, ctx)``: ``train: pkg.mod:train``;
- an Optuna objective ``objective(trial)``: ``train: {optuna: pkg.mod:objective}``;
- a Ray Tune function trainable ``train_fn(config)``: ``train: {tune: pkg.mod:train_fn}``
  (or a class trainable, a ``tune.Trainable`` subclass: :func:`is_class_trainable`).

A function named under the wrong form gets an error that gives the right one,
rather than being accepted: the forms differ in what the config must say (an
objective suggests its own parameters, so ``space`` may be left out; a trainable
gets Tune's nested ``config``), and a config that says which form it runs reads
the same to the next person. What tells the forms apart, strongest first:

- a call of ``tune.report`` / ``ray.train.report`` (however imported): a trainable;
- a parameter annotated ``optuna.Trial`` or a call of ``<it>.suggest_*``: an objective;
- one parameter named ``trial`` (an objective) or ``config`` (a trainable);
- two positional parameters: a training function.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeGuard

Kind = Literal["function", "optuna", "tune"]

REPORTS = frozenset({"tune.report", "train.report", "ray.train.report", "ray.tune.report"})
"""The calls that make a function a Ray Tune trainable, as its code writes them."""


@dataclass(frozen=True)
class Form:
    """What a function's code says it is written for, and why.

    Attributes:
        kind: the form of ``train`` that calls it as it is written.
        why: the evidence, in words (``its one parameter is named trial``).
        strong: evidence no other form's function would show (a report to Tune, a
            suggest, an annotation), as opposed to a parameter's name or count.
    """

    kind: Kind
    why: str
    strong: bool = False

    def written(self, target: str) -> str:
        """The ``train:`` line that runs ``target`` as this kind."""
        if self.kind == "optuna":
            return f"train: {{optuna: {target}}}"
        if self.kind == "tune":
            return f"train: {{tune: {target}}}"
        return f"train: {target}"


def form_of(function: Callable[..., Any]) -> Form | None:
    """The form ``function`` (imported) is written for; ``None`` where its code cannot say."""
    try:
        source = textwrap.dedent(inspect.getsource(function))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, ValueError):
        return None
    defined = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if defined is None:
        return None
    globals_ = getattr(function, "__globals__", {})
    reports = {name for name, value in globals_.items() if _is_ray_report(value)}
    return _form(defined, reports)


def is_class_trainable(function: Any) -> TypeGuard[type]:
    """Whether ``function`` is a subclass of Ray Tune's ``Trainable`` (known by its
    classes' names: nothing of Ray is imported for it)."""
    return isinstance(function, type) and any(
        cls.__name__ == "Trainable" and cls.__module__.startswith("ray.tune")
        for cls in function.__mro__
    )


def module_source(module_name: str) -> ast.Module | None:
    """The parsed source of a Python module, found and read, not imported; ``None``
    where there is none to read (no such module, a compiled one, a parent package
    that fails to import, a file that does not parse)."""
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    if found is None or not found.origin or not found.origin.endswith(".py"):
        return None
    try:
        return ast.parse(Path(found.origin).read_text(encoding="utf-8"), found.origin)
    except (OSError, SyntaxError, ValueError):
        return None


def form_in_source(target: str) -> Form | None:
    """The form that ``package.module:function`` is written for, from its module's source
    (found, not imported); ``None`` where the source cannot say (no such module or
    function, a compiled module, a function bound another way)."""
    module_name, _, attribute = target.partition(":")
    tree = module_source(module_name)
    if tree is None:
        return None
    defined = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == attribute
    ]
    if len(defined) != 1 or isinstance(defined[0], ast.AsyncFunctionDef):
        return None
    return _form(defined[0], _imported_reports(tree))


def _form(function: ast.FunctionDef, reports: set[str]) -> Form | None:
    """The form one ``def`` is written for (``reports``: names bound to Tune's report)."""
    calls = [_dotted(node.func) for node in ast.walk(function) if isinstance(node, ast.Call)]
    reported = next((c for c in calls if c in REPORTS or c in reports), None)
    if reported is not None:
        return Form("tune", f"it calls {reported}", strong=True)
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    required = positional[: len(positional) - len(arguments.defaults)]
    if len(required) == 1:
        return _one_parameter(required[0], calls)
    if len(positional) >= 2 or arguments.vararg is not None:
        return Form("function", "it takes (params, ctx)")
    return None


def _one_parameter(first: ast.arg, calls: list[str]) -> Form | None:
    """The form of a function of one required parameter, from that parameter and its calls."""
    annotation = ast.unparse(first.annotation) if first.annotation else ""
    named = {"trial": "optuna", "config": "tune"}
    if annotation.rsplit(".", 1)[-1].strip("'\"") in {"Trial", "BaseTrial"}:
        return Form("optuna", f"its parameter is annotated {annotation}", strong=True)
    if any(c.startswith(f"{first.arg}.suggest_") for c in calls):
        return Form("optuna", f"it calls {first.arg}.suggest_*", strong=True)
    kind = named.get(first.arg)
    if kind == "optuna":
        return Form("optuna", "its one parameter is named trial")
    if kind == "tune":
        return Form("tune", "its one parameter is named config")
    return None


def refused_on_import(module_name: str) -> tuple[str, str] | None:
    """Why ``module_name`` may not be imported, and the fix: it runs a search of its own at
    its top level (:func:`search_run_on_import`); ``None``: it may (or is imported already,
    so whatever it runs has run)."""
    call = None if module_name in sys.modules else search_run_on_import(module_name)
    if call is None:
        return None
    return (
        f"'{module_name}' runs a search when imported ({call}), and hpsearch imports it "
        "in the driver and in every trial's worker",
        'put that under if __name__ == "__main__": (the config\'s study runs the search)',
    )


def search_run_on_import(module_name: str) -> str | None:
    """The search a module runs at its top level, where an import reaches it (``line 9:
    study.optimize(...)``): Optuna's ``optimize``, Ray Tune's ``tune.run`` or a ``Tuner``'s
    ``fit``, or ``hpsearch.run`` (a script that defines ``train`` and starts its own
    search), outside ``if __name__ == "__main__":``. ``None``: none, or no source to read.

    hpsearch imports the module that ``train`` names in the driver and in every trial's
    worker: such a call would run a whole search of its own in each.
    """
    tree = module_source(module_name)
    if tree is None:
        return None
    imported = _imported_modules(tree)
    tuners: set[str] = set()  # names the module binds to a Tuner
    runs = _hpsearch_runs(tree)  # names it binds to hpsearch.run (from hpsearch import run)
    for node in tree.body:
        value = node.value if isinstance(node, ast.Expr | ast.Assign) else None
        if not isinstance(value, ast.Call):
            continue
        if isinstance(value.func, ast.Name) and value.func.id in runs:
            return f"line {node.lineno}: {value.func.id}(...)"
        if isinstance(node, ast.Assign) and _last(value.func) == "Tuner":
            tuners.update(t.id for t in node.targets if isinstance(t, ast.Name))
            continue
        shown = _search_call(value.func, imported, tuners)
        if shown:
            return f"line {node.lineno}: {shown}"
    return None


def _search_call(func: ast.expr, imported: set[str], tuners: set[str]) -> str:
    """The search a top-level call runs, in words (``study.optimize(...)``); ``""``: none."""
    if not isinstance(func, ast.Attribute):
        return ""
    receiver = func.value
    named = _dotted(receiver) or (
        f"{_dotted(receiver.func)}(...)" if isinstance(receiver, ast.Call) else "..."
    )
    if func.attr == "fit":
        built = isinstance(receiver, ast.Call) and _last(receiver.func) == "Tuner"
        bound = isinstance(receiver, ast.Name) and receiver.id in tuners
        return f"{named}.fit()" if built or bound else ""
    if func.attr == "optimize" and "optuna" in imported:
        return f"{named}.optimize(...)"
    if func.attr == "run" and named in {"tune", "ray.tune"} and "ray" in imported:
        return f"{named}.run(...)"
    if func.attr == "run" and named == "hpsearch" and "hpsearch" in imported:
        return "hpsearch.run(...)"
    return ""


def _hpsearch_runs(tree: ast.Module) -> set[str]:
    """The names a module binds to ``hpsearch.run`` (``from hpsearch import run as go``)."""
    return {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module == "hpsearch"
        for alias in node.names
        if alias.name == "run"
    }


def _last(node: ast.expr) -> str:
    """The last name of what is called: ``Tuner`` for ``tune.Tuner``."""
    return _dotted(node).rpartition(".")[2]


def _imported_modules(tree: ast.Module) -> set[str]:
    """The top-level packages a module imports (``optuna``, ``ray``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.partition(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.partition(".")[0])
    return names


def _dotted(node: ast.expr) -> str:
    """``a.b.c`` for an attribute chain or a name; ``""`` for anything else called."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _imported_reports(tree: ast.Module) -> set[str]:
    """The names a module binds to Tune's report (``from ray.tune import report as r``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in {"ray.tune", "ray.train"}:
            names.update(a.asname or a.name for a in node.names if a.name == "report")
    return names


def _is_ray_report(value: object) -> bool:
    return getattr(value, "__name__", "") == "report" and str(
        getattr(value, "__module__", "")
    ).startswith("ray.")


_WHAT: dict[Kind, str] = {
    "function": "a training function train(params, ctx)",
    "optuna": "an Optuna objective",
    "tune": "a Ray Tune function trainable",
}
_THEN: dict[Kind, str] = {
    "function": "",
    "optuna": ", which suggests its own parameters (space may go)",
    "tune": ", with its parameters in space (or space: mymod:param_space)",
}


def wrong_form(target: str, form: Form) -> tuple[str, str]:
    """The error for ``target`` named under another form than ``form``: what it is, and
    the ``train:`` line to write (a problem and its fix, as config errors have them)."""
    return (
        f"'{target}' is {_WHAT[form.kind]} ({form.why})",
        f"write {form.written(target)}{_THEN[form.kind]}",
    )
