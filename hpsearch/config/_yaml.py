"""Strict YAML reading: safe tags only, no duplicate keys, YAML 1.2 floats, key line numbers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hpsearch.errors import ConfigError

KeyPath = tuple[str | int, ...]


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that reads ``1e-3`` as a float, as YAML 1.2 and every user expect.

    PyYAML implements YAML 1.1, where a float needs a dot and a signed exponent,
    so ``1e-3`` and ``1.0e3`` would silently become strings.
    """


_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


@dataclass(frozen=True)
class YamlDocument:
    """A parsed YAML file and where each key was written.

    Attributes:
        data: the plain Python value of the document.
        lines: 1-based line of each key path, e.g. ``("space", "lr", "low") -> 12``.
    """

    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def line_of(self, path: KeyPath) -> int | None:
        """Line of ``path`` or of its nearest written ancestor (pydantic adds union tags)."""
        for end in range(len(path), 0, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return None


def read_yaml(path: Path) -> YamlDocument:
    """Read one YAML document strictly.

    Raises:
        ConfigError: the file is missing or unreadable, is not valid YAML, uses a
            non-standard tag (``!!python/...``), or repeats a key in one mapping.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, "", "file not found", "check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, "", f"cannot read the file ({exc})") from None

    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return YamlDocument(data=None)
        lines: dict[KeyPath, int] = {}
        _index_keys(path, node, (), lines)
        data = loader.construct_document(node)
    except yaml.constructor.ConstructorError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise ConfigError(
            path,
            "",
            f"unsupported YAML tag ({exc.problem})",
            "hpsearch configs use plain YAML values only; remove the !!tag",
            line=line,
        ) from None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        fix = _syntax_fix(str(exc.problem), text.splitlines()[line - 1] if line else "")
        raise ConfigError(path, "", f"invalid YAML: {exc.problem}", fix, line=line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(path, "", f"invalid YAML: {exc}", "fix the syntax") from None
    finally:
        loader.dispose()
    return YamlDocument(data=data, lines=lines)


def _index_keys(source: Path, node: yaml.Node, prefix: KeyPath, out: dict[KeyPath, int]) -> None:
    """Record the line of every key below ``node`` and reject repeated keys."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if (
                not isinstance(key_node, yaml.ScalarNode)
                or key_node.tag == "tag:yaml.org,2002:merge"
            ):
                continue
            key = key_node.value
            line = key_node.start_mark.line + 1
            if key in seen:
                dotted = ".".join(str(p) for p in (*prefix, key))
                raise ConfigError(
                    source,
                    dotted,
                    f"duplicate key (first written on line {seen[key]})",
                    "keep one of them",
                    line=line,
                )
            seen[key] = line
            out[(*prefix, key)] = line
            _index_keys(source, value_node, (*prefix, key), out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            out[(*prefix, index)] = item.start_mark.line + 1
            _index_keys(source, item, (*prefix, index), out)


_PLACEHOLDER_IN_FLOW = re.compile(r"\{[^{}]*\{\w[\w.]*\}")
"""A ``{...}`` mapping on one line holding a ``{name}`` placeholder unquoted."""


def _syntax_fix(problem: str, line: str) -> str:
    """What to change for a YAML syntax error ``problem`` on ``line``."""
    if "'\\t'" in problem:
        return "indent with spaces, not tabs"  # YAML indents with spaces; a tab is stray
    if _PLACEHOLDER_IN_FLOW.search(line):
        # train: {command: python t.py --lr {lr}}: YAML reads {lr} as a mapping of its own.
        return (
            "quote a command holding {placeholders} inside { }, e.g. train: {command: "
            '"python train.py --lr {lr}"}, or write it on lines of its own'
        )
    return "fix the syntax"
