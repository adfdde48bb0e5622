"""Metrics read from a training script's text output: patterns and ``key=value`` scalars.

Many scripts print their results for people, not as JSON::

    Test set: Average loss: 0.0339, Accuracy: 9890/10000 (99%)

``train.metrics`` then takes regular expressions whose named groups are the
metrics, and/or ``scalars: true`` for lines of ``key=value`` or ``key: value``
pairs (as some tools read them; a printed dict's ``'key': value`` too)::

    train:
      command: python main.py --lr {lr}
      metrics:
        patterns:
          - 'Accuracy: \\d+/\\d+ \\((?P<val_accuracy>[\\d.]+)%\\)'
        scalars: false
        stderr: false     # true: read stderr's lines too (Python's logging writes there)

A line that a pattern matches (or that holds scalars) is one report. Its step is
the group (or the scalar) named ``step`` (``metrics.step`` renames it), else how
many lines without one that pattern matched before it. Several patterns matching one
line make one report. A line a progress bar redrew with carriage returns (tqdm's, as
Lightning and Hugging Face draw them) is read as a terminal shows it: its last
drawing. A trial that completes while a pattern never matched its output fails,
naming the pattern: a metric the search never sees is a pattern to fix, not a
silent gap.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import Field, field_validator, model_validator

from hpsearch._settings import Settings

_SCALAR = re.compile(
    r"(?P<key>[A-Za-z_][\w./@-]*)['\"]?\s*[:=]\s*"
    r"(?:(?:(?:np|numpy|torch)\.)?(?:float\d*|int\d*|tensor)\()?"
    r"(?P<value>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(?![\w:/-]|\.\w|%\|)"
)
"""``key=value`` or ``key: value``, the value a number (not a date, a path, a version, a
time such as ``eta: 0:00:05``, a count such as ``10/100``, a progress bar's share done
such as tqdm's ``train: 100%|###|``; a sentence's full stop may end it); the key may be
quoted, as in a printed dict (Hugging Face's Trainer logs ``{'loss': 0.69, 'epoch': 0.5}``),
and the number printed as NumPy 2 or torch print one (``np.float64(0.81)``,
``tensor(0.5)``); ``Acc@1: 76.1`` is ``Acc@1`` (timm's top-1 accuracy)."""


_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"

_ROW = re.compile(
    r"^\s*[│┃|]\s*(?P<key>[A-Za-z_][^\s│┃|]*)\s*[│┃|]\s*(?P<value>" + _NUMBER + r")\s*[│┃|]"
    r"|^\s*(?P<plain_key>[A-Za-z_][\w./:@-]*) {2,}(?P<plain_value>"
    + _NUMBER
    + r")(?: {2,}\S+)*\s*$"
)
"""A table's row of a name and its number: Lightning prints ``trainer.test``'s and
``trainer.validate``'s results so, drawn by ``rich`` (``│ test_acc │ 0.92 │``) or as
plain text (``    test_acc       0.92``); with several data loaders, the first's."""

_NAME = re.compile(r"[A-Za-z_][\w./@-]*\Z")
"""A column's name in a table's header (``train_loss``, ``Acc@1``)."""
_CELL = re.compile(r"(?:" + _NUMBER + r"|nan|inf|-inf|#na#|\d+:\d\d(?::\d\d)?)\Z", re.IGNORECASE)
"""A cell of a table's row: a number, a missing one, or a time (``00:05``, not a metric)."""
_FULL_NUMBER = re.compile(_NUMBER + r"\Z")
_HEADER_NAMES = 3
"""The fewest names a table's header has (fewer: a line of words, as often as not)."""


def shown(line: str) -> str:
    """What a terminal shows of ``line``: the text after its last carriage return.

    A progress bar (tqdm's) redraws itself with ``\\r`` and no newline, so one line of
    its output holds every drawing, the first one first; its metrics, and what a failure
    quotes, are those of the last drawing.
    """
    if "\r" not in line:
        return line
    drawn = [part for part in line.rstrip("\r\n").split("\r") if part.strip()]
    return drawn[-1] if drawn else ""


class TextMetrics(Settings):
    """Metrics read from a script's text lines (``train.metrics``, command mode).

    Attributes:
        patterns: regular expressions; each named group is a metric (its text a number).
        scalars: also read ``key=value`` / ``key: value`` numbers from every line, and
            tables: a row of a name and its number (``│ test_acc │ 0.92 │``, as
            Lightning prints its test results), or rows of numbers under a header of
            names (as fastai prints its epochs).
        step: the group or scalar that holds a report's step (else the count of lines
            read without one).
        stderr: also read the script's stderr, where Python's ``logging`` writes by default.
    """

    patterns: list[str] = Field(default_factory=list)
    scalars: bool = False
    step: str = Field(default="step", min_length=1)
    stderr: bool = False

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for index, pattern in enumerate(patterns):
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"patterns[{index}] {pattern!r} is not a regular expression: {exc}"
                ) from None
            if not compiled.groupindex:
                raise ValueError(
                    f"patterns[{index}] {pattern!r} names no metric; name a group, "
                    "e.g. 'loss: (?P<loss>[\\d.]+)'"
                )
        return patterns

    @model_validator(mode="after")
    def _something_to_read(self) -> TextMetrics:
        if not self.patterns and not self.scalars:
            raise ValueError("give patterns, or scalars: true (or metrics: stdout-jsonl)")
        return self


@dataclass
class TextReader:
    """Reads one trial's output, line by line, into reports (see the module).

    Attributes:
        spec: the patterns and options.
        matched: how many lines each pattern matched so far.
    """

    spec: TextMetrics
    matched: list[int] = field(default_factory=list)
    _compiled: list[re.Pattern[str]] = field(default_factory=list)
    _unstepped: list[int] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _header: list[str] = field(default_factory=list)
    _table_step: int | None = None

    def __post_init__(self) -> None:
        self._compiled = [re.compile(p) for p in self.spec.patterns]
        self.matched = [0] * len(self._compiled)
        # Lines read without a step, by who read them (each pattern, then scalars): a
        # stepless line's step is its source's count, whatever the lines that carry
        # one, so that it does not hang on how stdout's and stderr's lines interleave.
        self._unstepped = [0] * (len(self._compiled) + 1)

    def read(self, line: str) -> tuple[int, dict[str, float]] | None:
        """The report a line makes (its step and metrics), or ``None``. Thread-safe: the
        stdout and stderr readers may both read lines."""
        with self._lock:
            return self._read(line)

    def _read(self, line: str) -> tuple[int, dict[str, float]] | None:
        line = shown(line)
        metrics: dict[str, float] = {}
        step: int | None = None
        sources: list[int] = []
        for index, pattern in enumerate(self._compiled):
            found = pattern.search(line)
            if found is None:
                continue
            values = _numbers(found.groupdict())
            if not values:
                continue
            self.matched[index] += 1
            sources.append(index)
            step = _step(values, self.spec.step, step)
            metrics.update(values)
        row: dict[str, str] = {}
        if self.spec.scalars:
            row = self._table_row(line)
            pairs = {m["key"]: m["value"] for m in _SCALAR.finditer(line)} | row
            values = _numbers(pairs)
            if values:
                sources.append(len(self._compiled))
                step = _step(values, self.spec.step, step)
                metrics.update(values)
        # A table's rows of names and numbers are one report: they share its step.
        table_step, self._table_step = self._table_step, None
        if not metrics:
            return None
        if step is None and row and table_step is not None:
            step = table_step
        elif step is None:
            step = self._unstepped[sources[0]]
            for source in sources:
                self._unstepped[source] += 1
        if row and len(row) == 1:
            self._table_step = step
        return step, metrics

    def _table_row(self, line: str) -> dict[str, str]:
        """The names and numbers of a table's row in ``line``: a name and its number
        (:data:`_ROW`), or the numbers of a row under the last header, a line of at least
        three names (fastai prints ``epoch  train_loss  valid_loss  accuracy  time``,
        then a row an epoch, whatever else is printed between them)."""
        found = _ROW.match(line)
        if found is not None:
            return {found["key"] or found["plain_key"]: found["value"] or found["plain_value"]}
        cells = line.split()
        if len(cells) >= _HEADER_NAMES and all(_NAME.match(cell) for cell in cells):
            self._header = cells
            return {}
        if len(cells) != len(self._header) or not all(_CELL.match(cell) for cell in cells):
            return {}
        return {
            name: cell
            for name, cell in zip(self._header, cells, strict=True)
            if _FULL_NUMBER.match(cell)
        }

    def never_matched(self) -> list[str]:
        """The patterns no line has matched, as ``patterns[i] 'text'``."""
        return [
            f"train.metrics.patterns[{i}] {pattern!r}"
            for i, (pattern, count) in enumerate(zip(self.spec.patterns, self.matched, strict=True))
            if count == 0
        ]


def last_printed(text: str, names: Sequence[str]) -> dict[str, float]:
    """The last value ``text`` prints of each of ``names``, as ``scalars: true`` reads
    lines (``name=value``, ``name: value``, a printed dict, a table's row); a name it never
    prints, or prints as NaN, is left out."""
    reader = TextReader(TextMetrics(scalars=True))
    last: dict[str, float] = {}
    wanted = set(names)
    for line in text.splitlines():
        read = reader.read(line)
        if read is not None:
            last.update((k, v) for k, v in read[1].items() if k in wanted and not math.isnan(v))
    return last


def naming_lines(text: str, names: Sequence[str]) -> dict[str, str]:
    """The last line of ``text`` that names each of ``names`` as a metric is named
    (``name: ...``, ``name=...``), as a terminal shows it: where a script prints a metric
    that no rule reads (``Accuracy: 9842/10000 (98%)``), what its trial quotes."""
    found: dict[str, str] = {}
    for name in names:
        naming = re.compile(rf"(?<![\w.@/-]){re.escape(name)}['\"]?\s*[:=]\s*\S")
        for line in reversed(text.splitlines()):
            drawn = shown(line)
            if (named := naming.search(drawn)) is not None:
                # What is around the name: a line can be megabytes (no newline for hours).
                found[name] = drawn[max(0, named.start() - 80) : named.end() + 300].strip()
                break
    return found


def pattern_for(line: str, name: str) -> str | None:
    """A pattern that reads ``name``'s number from ``line``, which names it with more
    than a number (``Accuracy: 9842/10000 (98%)``): a percent where there is one, else
    its first number. ``None``: no number follows the name, or the name cannot be a
    pattern's group (``val/acc``: a group's name is a Python identifier)."""
    where = re.search(rf"(?<![\w.@/-]){re.escape(name)}['\"]?\s*[:=]", line)
    if where is None or not name.isidentifier():
        return None
    rest = line[where.end() :]
    numbers = list(re.finditer(_NUMBER, rest))
    if not numbers:
        return None
    percents = [n for n in numbers if rest[n.end() : n.end() + 1] == "%"]
    chosen = (percents or numbers)[0]
    pattern, at = _literal(line[where.start() : where.end()]), 0
    for number in numbers:
        pattern += _literal(rest[at : number.start()])
        if number is chosen:
            return pattern + rf"(?P<{name}>[\d.]+)"
        pattern += r"[\d.]+"
        at = number.end()
    return None  # not reached: the chosen number is one of them


def _literal(text: str) -> str:
    """``text`` as a pattern matches it, its spaces left plain (a config's reader sees them)."""
    return re.escape(text).replace("\\ ", " ")


def _numbers(groups: dict[str, str | None]) -> dict[str, float]:
    values: dict[str, float] = {}
    for name, text in groups.items():
        if text is None:
            continue
        try:
            values[name] = float(text.rstrip("%"))
        except ValueError:
            continue
    return values


def _step(values: dict[str, float], name: str, step: int | None) -> int | None:
    """Take the step out of ``values`` (a metric no more), else keep ``step``."""
    if name in values:
        return int(values.pop(name))
    return step
