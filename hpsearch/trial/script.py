"""A training script run as it is (``train: {command: ...}``): its command line and its reports.

The settings of command mode, declared once: the config composes them as its
``train`` section, and every trial's worker reads the same object
(:mod:`hpsearch.adapters` runs the script).
"""

from __future__ import annotations

import shlex
import string
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from hpsearch._settings import Seconds, Settings
from hpsearch.trial.text_metrics import TextMetrics

ARGS = "args"
"""``{args}``, an argument of its own: ``--name=value`` for each parameter the trial has."""


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
            ``name``, and an argument ``{args}`` by ``--name=value`` for each
            parameter the trial has (W&B sweeps' ``${args}``: a conditional space's
            branch reaches an unchanged argparse script). A string is split as a
            shell would, without a shell; a list is taken as the arguments.
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
            return (
                f"append it as a JSON line, {line}, to {self.metrics_file} (HPSEARCH_METRICS_FILE)"
            )
        if self.metrics == "stdout-jsonl":
            return (
                "print it on stdout (stderr, where logging writes, is not read) as a JSON line, "
                f"{line}, or read the text it prints with train.metrics (patterns, or "
                "scalars: true; stderr: true reads stderr too)"
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
                names = [field for _, field, _, _ in string.Formatter().parse(argument) if field]
            except ValueError as exc:
                raise ValueError(
                    f"train.command: cannot read {argument!r} ({exc}); "
                    "write {name} for a parameter and {{ }} for a literal brace"
                ) from None
            for name in names:
                if name == ARGS and name not in space:
                    if argument != "{args}":
                        raise ValueError(
                            f"train.command: {{args}} inside {argument!r}; write {{args}} as "
                            "an argument of its own (it becomes one --name=value per parameter)"
                        )
                    continue
                if name not in space:
                    raise ValueError(
                        f"train.command names {{{name}}}, which is not in space; "
                        f"use one of {', '.join('{' + n + '}' for n in space)}"
                    )
                when = getattr(space[name], "when", None)
                if when:
                    raise ValueError(
                        f"train.command names {{{name}}}, which only trials with "
                        f"{_branch(when)} have ({_other_branches(when, space)} have none); "
                        "give the parameters with {args}, an argument of its own "
                        "(one --name=value per parameter a trial has)"
                    )
