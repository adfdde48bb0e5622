"""Errors a user can cause and fix, each rendered as one line by the CLI (exit code 2)."""

from __future__ import annotations

from pathlib import Path

from hpsearch._secrets import shown, without_passwords


class HpsearchError(Exception):
    """Base class of every error hpsearch raises on purpose.

    The CLI prints ``str(error)`` as one line and exits with code 2, so the
    message must say what is wrong and how to fix it. A URL's password in it is
    ``***`` (:mod:`hpsearch._secrets`): the line lands in terminals and CI logs.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(shown(arg) for arg in args))


class ConfigError(HpsearchError):
    """A config file that cannot be used: missing, unreadable, or invalid.

    Args:
        source: the config file (or another description of where the value came from).
        key: dotted path of the offending key, e.g. ``space.lr.low``; empty for the whole file.
        problem: what is wrong.
        fix: what to change.
        line: 1-based line in ``source`` where the key is, when known.
        others: the file's other problems found with this one (``hpsearch validate``
            lists them all; a run names the first and counts the rest).
    """

    def __init__(
        self,
        source: str | Path,
        key: str,
        problem: str,
        fix: str = "",
        line: int | None = None,
        *,
        others: tuple[ConfigError, ...] = (),
    ) -> None:
        self.others = others
        self.source = str(source)
        self.key = key
        # One line, whatever the text quoted (an exception's message may span several:
        # optuna.integration's starts with a line break, before what to install).
        self.problem = without_passwords(one_line(problem))
        self.fix = without_passwords(one_line(fix))
        self.line = line
        where = self.source if line is None else f"{self.source}:{line}"
        text = f"{where}: {key}: {self.problem}" if key else f"{where}: {self.problem}"
        if self.fix:
            text = f"{text}; {self.fix}"
        self.alone = text
        if others:
            text = f"{text} (and {len(others)} more problem{'s' if len(others) > 1 else ''})"
        super().__init__(text)

    def every_problem(self) -> list[str]:
        """This problem and the others found with it, a line each."""
        return [self.alone, *(other.alone for other in self.others)]


def one_line(text: str) -> str:
    """``text`` on one line: its lines joined by spaces, runs of blanks made one."""
    return " ".join(text.split())


class StudyError(HpsearchError):
    """The Optuna study cannot be opened or does not match the config."""


class ResultsError(HpsearchError):
    """A results query that cannot be answered (no such study, no finished trial yet)."""
