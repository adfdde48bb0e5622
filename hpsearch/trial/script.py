"""A training script run as it is (``train: {command: ...}``): its command line and its reports.

The settings of command mode, declared once: the config composes them as its
``train`` section, and every trial's worker reads the same object
(:mod:`hpsearch.adapters` runs the script).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import string
import sys
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from hpsearch._settings import Seconds, Settings
from hpsearch.trial.text_metrics import TextMetrics

ARG_FORMS: dict[str, str] = {
    "args": "--name=value",
    "args_no_equals": "--name value",
    "args_no_hyphens": "name=value (Hydra's overrides)",
    "args_no_boolean_flags": "--name=value, --name for true, nothing for false",
    "args_json": "the parameters as one JSON argument",
    "args_json_file": "the path of a JSON file of the parameters",
}
"""The arguments that stand for all of a trial's parameters, as W&B sweeps' macros of the
same names do (``${args_no_hyphens}`` ...), each an argument of its own; a parameter of
the same name is a placeholder instead."""

PARAMS_FILE = "params.json"
"""``{args_json_file}``: the file in the trial's folder that holds its parameters."""

WANDB_NESTED_VARIABLE = "HPSEARCH_WANDB_NESTED"
"""The environment variable naming (comma-separated) the groups whose dotted parameters
(``model.depth``) a command trial's ``wandb.config`` holds nested (``config["model"]
["depth"]``), as W&B holds a sweep's nested parameters; ``hpsearch convert`` sets it in
``train.env``. Other dotted names stay flat, as W&B keeps them."""

NNI_NESTED_VARIABLE = "HPSEARCH_NNI_NESTED"
"""The environment variable naming (comma-separated) the nested choices that a command
trial's ``nni.get_next_parameter()`` gives as NNI does, ``{"_name": "sgd", "momentum":
0.5}``, from the parameters ``optimizer`` and ``optimizer.sgd.momentum``; ``hpsearch
convert`` sets it in ``train.env``."""


def activated_path(path: str | None) -> str:
    """``path`` (a ``PATH``) as activating hpsearch's own environment would make it.

    When hpsearch runs from a virtual or conda environment, that environment's ``bin``
    comes first if it is not on ``path`` already: a program installed beside hpsearch
    (``torchrun``, ``accelerate``) is found, and a script's own ``python`` is this one,
    whether or not the environment was activated (``.venv/bin/hpsearch run``). Else
    ``path`` as it is.
    """
    path = path if path is not None else os.defpath
    folder = os.path.dirname(sys.executable)
    in_environment = sys.prefix != sys.base_prefix or os.path.isdir(
        os.path.join(sys.prefix, "conda-meta")
    )
    if not in_environment or not folder or folder in path.split(os.pathsep):
        return path
    return os.pathsep.join([folder, path]) if path else folder


def arg_form(argument: str) -> str | None:
    """The form of :data:`ARG_FORMS` that ``argument`` is, written alone (``{args}``), or
    ``None``."""
    form = argument[1:-1]
    return form if argument == f"{{{form}}}" and form in ARG_FORMS else None


def expand(form: str, params: Mapping[str, Any], params_file: str) -> list[str]:
    """The arguments ``{form}`` (one of :data:`ARG_FORMS`) stands for in a trial with ``params``
    (``{args_json_file}``: ``params_file``, which the caller writes)."""
    pairs = list(params.items())
    if form == "args_no_equals":
        return [word for name, value in pairs for word in (f"--{name}", str(value))]
    if form == "args_no_hyphens":
        return [f"{name}={value}" for name, value in pairs]
    if form == "args_no_boolean_flags":
        return [
            f"--{name}" if value is True else f"--{name}={value}"
            for name, value in pairs
            if value is not False
        ]
    if form == "args_json":
        return [json.dumps(dict(params))]
    if form == "args_json_file":
        return [params_file]
    return [f"--{name}={value}" for name, value in pairs]


_TRIAL_VARIABLE = re.compile(r"\$(?:\{(HPSEARCH_\w+)\}|(HPSEARCH_\w+))")
"""``$HPSEARCH_...`` or ``${HPSEARCH_...}`` in an argument."""


def with_trial_variables(argument: str, variables: Mapping[str, str]) -> str:
    """``argument`` with each ``$HPSEARCH_NAME`` (``${HPSEARCH_NAME}``) of ``variables`` (the
    trial's environment) replaced by its value, as a shell would: ``--out
    $HPSEARCH_METRICS_FILE`` reaches the script as the trial's file. The command runs
    without a shell, so only the variables hpsearch sets are read so; any other ``$`` is
    the script's to read."""

    def value(found: re.Match[str]) -> str:
        name = found[1] or found[2]
        return variables.get(name, found[0])

    return _TRIAL_VARIABLE.sub(value, argument) if "$" in argument else argument


def fill(argument: str, params: Mapping[str, Any]) -> str:
    """``argument`` with each ``{name}`` (``{name:format}``, ``{name!r}``) replaced by the
    parameter of exactly that name: ``{optimizer.lr}`` is the parameter ``optimizer.lr``
    (Hydra's dotted keys), not an attribute of ``optimizer``.

    Raises:
        KeyError: a name the trial does not have (a parameter of another branch).
    """
    text: list[str] = []
    for literal, name, spec, conversion in string.Formatter().parse(argument):
        text.append(literal)
        if name is None:
            continue
        if name not in params:
            raise KeyError(
                f"the command names {{{name}}}, which this trial does not have (a parameter "
                "of another branch of the space); pass {args} (--name=value for the "
                "parameters the trial has), or read them from HPSEARCH_PARAMS"
            )
        value = params[name]
        if conversion:
            value = {"r": repr, "a": ascii}.get(conversion, str)(value)
        text.append(format(value, spec or ""))
    return "".join(text)


def _branch(when: Mapping[str, Any]) -> str:
    """A ``when`` in words: ``optimizer sgd`` (``a or b`` for a list)."""
    return " and ".join(
        f"{name} {' or '.join(map(str, wanted)) if isinstance(wanted, list) else wanted}"
        for name, wanted in when.items()
    )


def _other_branches(when: Mapping[str, Any], space: Mapping[str, Any]) -> str:
    """The trials a ``when`` leaves out, in words: the other choices of its parameters."""
    lacking: list[str] = []
    for name, wanted in when.items():
        wanted_values = wanted if isinstance(wanted, list) else [wanted]
        choices = getattr(space.get(name), "choices", None) or []
        others = [c for c in choices if c not in wanted_values]
        lacking.append(f"{name} {' or '.join(map(str, others))}" if others else f"other {name}")
    return "trials with " + ", or ".join(lacking)


class CommandSpec(Settings):
    """A training script run as it is, once per trial (``train: {command: ...}``).

    Attributes:
        command: the command line; ``{name}`` is replaced by the trial's parameter
            ``name`` (``{optimizer.lr}`` by the parameter ``optimizer.lr``), and an
            argument ``{args}`` by ``--name=value`` for each parameter the trial has
            (W&B sweeps' ``${args}``: a conditional space's branch reaches an
            unchanged argparse script); ``{args_no_hyphens}`` (``name=value``, Hydra's
            overrides) and W&B's other forms likewise (:data:`ARG_FORMS`). A string is
            split as a shell would, without a shell; a list is taken as the arguments.
        metrics: ``stdout-jsonl``: each line the script prints that is a JSON object
            with an integer ``step`` is a report (its other numeric keys are
            metrics); a JSON object without ``step`` gives final metrics; any other
            line is the script's output. ``file-jsonl``: the same lines, read from
            ``metrics_file`` as the script appends them. Or patterns and scalars
            read from the text it prints (:class:`~hpsearch.trial.text_metrics.TextMetrics`),
            its JSON lines read as with ``stdout-jsonl``.
        metrics_file: the file of ``file-jsonl``, in the trial's folder unless absolute.
        stop_grace: after SIGTERM (a pruned or stopped trial), how long the script
            has to exit before SIGKILL.
        env: more environment variables for the script.
    """

    command: str | list[str]
    metrics: Literal["stdout-jsonl", "file-jsonl"] | TextMetrics = "stdout-jsonl"
    metrics_file: str = Field(default="metrics.jsonl", min_length=1)
    stop_grace: Seconds = 10.0
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("command")
    @classmethod
    def _not_empty(cls, command: str | list[str]) -> str | list[str]:
        if not (command.strip() if isinstance(command, str) else command):
            raise ValueError("the command is empty; e.g. command: python train.py --lr {lr}")
        return command

    def how_to_report(self, metric: str) -> str:
        """How the script reports ``metric``: the fix when a trial of it never did."""
        line = f'{{"step": 0, "{metric}": ...}}'
        if self.metrics == "file-jsonl":
            # A script that writes its own relative path writes where it runs, which every
            # trial shares; hpsearch reads the trial's own file.
            where = (
                self.metrics_file
                if os.path.isabs(self.metrics_file)
                else f"{self.metrics_file} in the trial's own folder, not where the script runs"
            )
            return (
                f"append it as a JSON line, {line}, to the file HPSEARCH_METRICS_FILE names "
                f"({where}; a script that takes the path as a flag: --flag $HPSEARCH_METRICS_FILE)"
            )
        if self.metrics == "stdout-jsonl":
            return (
                f"print it on stdout as a JSON line, {line}, or as {metric}: ... (on stdout or "
                "stderr: read when the script ends), or read the text it prints with "
                "train.metrics (patterns, or scalars: true; stderr: true reads stderr too)"
            )
        where = "stdout or stderr" if self.metrics.stderr else "stdout (or set stderr: true)"
        return (
            f"print it on {where} as {metric}=... with train.metrics.scalars: true, or name "
            f"it in a pattern: (?P<{metric}>...)"
        )

    @property
    def arguments(self) -> list[str]:
        """The command's arguments, placeholders unfilled."""
        return shlex.split(self.command) if isinstance(self.command, str) else list(self.command)

    def check_placeholders(self, space: Mapping[str, Any]) -> None:
        """Check that every ``{name}`` of the command is a parameter of ``space``.

        Raises:
            ValueError: naming the placeholder and the parameters there are.
        """
        for argument in self.arguments:
            try:
                names = [f for _, f, _, _ in string.Formatter().parse(argument) if f is not None]
            except ValueError as exc:
                raise ValueError(
                    f"train.command: cannot read {argument!r} ({exc}); "
                    "write {name} for a parameter and {{ }} for a literal brace"
                ) from None
            for name in names:
                if name in ARG_FORMS and name not in space:
                    if argument != f"{{{name}}}":
                        raise ValueError(
                            f"train.command: {{{name}}} inside {argument!r}; write {{{name}}} "
                            f"as an argument of its own (it becomes {ARG_FORMS[name]})"
                        )
                    continue
                if name not in space:
                    raise ValueError(
                        f"train.command names {{{name}}}, which is not in space; "
                        f"use one of {', '.join('{' + n + '}' for n in space)} (a literal "
                        "brace is written {{ or }})"
                    )
                when = getattr(space[name], "when", None)
                if when:
                    raise ValueError(
                        f"train.command names {{{name}}}, which only trials with "
                        f"{_branch(when)} have ({_other_branches(when, space)} have none); "
                        "give the parameters with {args}, an argument of its own "
                        "(one --name=value per parameter a trial has)"
                    )
