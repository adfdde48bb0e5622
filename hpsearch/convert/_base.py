"""What every converter shares: the converted config, its notes, and the space check."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from hpsearch.config._yaml import read_yaml
from hpsearch.errors import ConfigError
from hpsearch.space import ParamSpec, expand_space
from hpsearch.trial.script import arg_form


@dataclass
class Converted:
    """A hpsearch config made from another tool's file.

    Attributes:
        config: the config's sections, in the order a person would write them.
        kind: what the source was, e.g. ``a W&B sweep``.
        notes: what was mapped loosely or is left to the user, a line each; they head
            the written file as comments and are printed when it is written.
        train_env: what a command trial's environment needs for the source's trial code
            to read its parameters as it did (nested ones), set in ``train.env``.
    """

    config: dict[str, Any]
    kind: str
    notes: list[str] = field(default_factory=list)
    train_env: dict[str, str] = field(default_factory=dict)

    @property
    def missing(self) -> list[str]:
        """What a config needs that the source did not say (``train``, ``objective``, an end)."""
        missing = [key for key in ("train", "objective") if key not in self.config]
        study = self.config.get("study", {})
        if "n_trials" not in study and "timeout" not in study:
            missing.append("study.n_trials")  # a search needs an end
        return missing

    def text(self, source: Path) -> str:
        """The config as YAML, headed by where it came from and the notes."""
        head = [f"# Converted from {source.name} ({self.kind}) by hpsearch convert."]
        if self.missing:
            head.append(f"# Still to add: {', '.join(self.missing)} (the source does not say).")
        head += [f"# {note}" for note in self.notes]
        body = yaml.safe_dump(
            self.config, sort_keys=False, default_flow_style=None, allow_unicode=True, width=100
        )
        return "\n".join(head) + "\n" + body


class Source:
    """The file being converted, for errors that name it, its key and, where known, its line."""

    def __init__(self, path: Path, line_of: Callable[[tuple[str | int, ...]], int | None]) -> None:
        self.path = path
        self._line_of = line_of

    @classmethod
    def of_yaml(cls, path: Path) -> tuple[Source, Any]:
        """A YAML source, its errors at their lines, and what it holds."""
        document = read_yaml(path)
        return cls(path, document.line_of), document.data

    def error(self, key: tuple[str | int, ...], problem: str, fix: str = "") -> ConfigError:
        """A one-line error at ``key`` of the source (``parameters.lr.distribution``)."""
        dotted = ".".join(str(part) for part in key)
        return ConfigError(self.path, dotted, problem, fix, line=self._line_of(key))

    def refuse_unknown(self, mapping: Mapping[str, Any], known: Collection[str]) -> None:
        """Refuse a top-level key outside ``known``: converted silently, it would be lost.

        Raises:
            ConfigError: the first such key, at its line.
        """
        for key in mapping:
            if key not in known:
                raise self.error((key,), "has no hpsearch equivalent", "remove it")


_PARAM = TypeAdapter(ParamSpec)


def checked_space(
    source: Source, space: dict[str, Any], key_of: Mapping[str, tuple[str | int, ...]]
) -> None:
    """Check the converted ``space`` as a config's would be, blaming the source's keys.

    Args:
        key_of: each space entry's key in the source (branches' entries included).

    Raises:
        ConfigError: an entry hpsearch would refuse (a range not a whole number of steps,
            a log range from 0, a name used in two branches), at its key in the source.
    """
    try:
        expanded = expand_space(space)
    except ValueError as exc:
        raise source.error(("parameters",), str(exc)) from None
    for name, entry in expanded.items():
        try:
            _PARAM.validate_python(entry)
        except ValidationError as exc:
            message = exc.errors(include_url=False)[0]["msg"]
            problem, _, fix = str(message).partition("; ")
            raise source.error(key_of.get(name, (name,)), problem, fix) from None


def log_range_unstepped(
    key: tuple[str | int, ...], kind: str, low: Any, high: Any, step: Any, *, notes: list[str]
) -> dict[str, Any]:
    """A quantized log distribution as a ``space`` entry on its log range, without its step
    (Optuna takes none on a log scale, and Ray Tune's ``OptunaSearch`` drops it too), whole
    numbers where the bounds and the step are; a note in ``notes`` says so."""
    notes.append(
        f"{'.'.join(map(str, key))}: {kind} is searched on its log range without its step "
        f"q={step}: Optuna takes no step on a log scale (as Ray Tune's OptunaSearch)."
    )
    if all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high, step)):
        return {"type": "int", "low": low, "high": high, "log": True}
    return {"type": "float", "low": float(low), "high": float(high), "log": True}


def command_line(arguments: list[str]) -> str:
    """``arguments`` as one command string that ``train.command`` splits back the same.

    ``{args}`` (and W&B's other forms, ``{args_no_hyphens}`` ...) stays as written; any
    other brace is doubled, so that it is not a placeholder.
    """
    words = []
    for argument in arguments:
        if arg_form(argument) is not None:
            words.append(argument)
            continue
        escaped = argument.replace("{", "{{").replace("}", "}}")
        words.append(shlex.quote(escaped))
    return " ".join(words)


def train_section(train: str) -> Any:
    """``--train``: a ``package.module:function`` as it is; a command line in command mode.

    A command's metrics are read from its output as ``key=value`` / ``key: value`` numbers
    (and JSON lines), the broadest reading hpsearch has.
    """
    if " " not in train.strip() and ":" in train:
        return train
    return {"command": train, "metrics": {"scalars": True}}
