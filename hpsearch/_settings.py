"""What every settings section is: a frozen pydantic model that rejects keys it does not know.

Each package declares its own settings here-shaped (``placement``'s packing,
``oom``'s, ``simulation``'s GPUs, ``trial``'s script), and the config file's
:class:`~hpsearch.config.RunConfig` composes them: a setting is declared once,
where the code that reads it lives, and travels as the same object to whatever
reads it (the policies, the worker).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    NonNegativeFloat,
    PositiveFloat,
    WithJsonSchema,
)

_DURATION = re.compile(
    r"^\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*$"
)


def parse_duration(value: Any) -> Any:
    """Accept seconds as a number, or a string such as ``"90s"``, ``"15m"``, ``"1h30m"``."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if not value.strip() or match is None or not any(match.groups()):
            raise ValueError(
                f"cannot read {value!r} as a duration; write seconds or e.g. '15m', '1h30m'"
            )
        hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
        return hours * 3600 + minutes * 60 + seconds
    return value


def _duration_schema(bound: dict[str, float], number: str) -> WithJsonSchema:
    """The JSON schema of a duration: a number within ``bound``, or a duration's text."""
    return WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", **bound},
                {"type": "string", "pattern": _DURATION.pattern},
            ],
            "description": f"seconds: {number}, or 90s, 15m, 1h30m",
        }
    )


Seconds = Annotated[
    PositiveFloat,
    BeforeValidator(parse_duration),
    _duration_schema({"exclusiveMinimum": 0}, "a number"),
]
"""A duration in seconds, written as a number or as ``90s``, ``15m``, ``1h30m``."""

NonNegativeSeconds = Annotated[
    NonNegativeFloat,
    BeforeValidator(parse_duration),
    _duration_schema({"minimum": 0}, "a number (0 for none)"),
]
"""A duration that may be none (0), written as :data:`Seconds` are."""


def _off_as_written(value: Any) -> Any:
    """``off``, as written: YAML 1.1, which PyYAML reads, takes a bare ``off`` (or ``no``)
    for false, and ``mode: off`` reached the settings as ``False``."""
    return "off" if value is False else value


OffAsWritten = BeforeValidator(_off_as_written)
"""For a setting one of whose options is ``off``: a YAML false is that option."""


class Settings(BaseModel):
    """A settings section: frozen, strict, and no key it does not declare."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
