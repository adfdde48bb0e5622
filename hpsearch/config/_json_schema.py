"""The config's JSON Schema, as a user writes the YAML: ``hpsearch schema`` prints it.

Pydantic's schema describes the config after its shorthands are read. A config
file is written before: a ``space`` entry may be a list of choices, a constant, or
a mapping of branches, and the whole ``space`` may name a Ray Tune ``param_space``
(``mymod:param_space``). :func:`config_schema` widens those places, so that an
editor checking a YAML file against it (``# yaml-language-server: $schema=...``)
accepts every config hpsearch accepts, and completes its keys.
"""

from __future__ import annotations

from typing import Any

from hpsearch.config._schema import RunConfig

SCHEMA_URI = "https://json-schema.org/draft/2020-12/schema"
_SHORTHANDS: list[dict[str, Any]] = [
    {"type": "array", "description": "choices (a categorical parameter)"},
    {"type": ["string", "number", "boolean", "null"], "description": "a constant"},
    {
        "type": "object",
        "description": "branches: each choice and the parameters it brings",
        "additionalProperties": {"type": ["object", "null"]},
    },
]


def config_schema() -> dict[str, Any]:
    """The JSON Schema of a config file."""
    schema = RunConfig.model_json_schema()
    space = schema["properties"]["space"]
    entry = space["additionalProperties"]
    space["additionalProperties"] = {"anyOf": [entry, *_SHORTHANDS]}
    schema["properties"]["space"] = {
        "anyOf": [
            space,
            {"type": "string", "description": "a Ray Tune param_space: package.module:name"},
        ],
        "description": "what to search: each parameter a range, choices or a constant",
    }
    return {"$schema": SCHEMA_URI, "title": "hpsearch config", **schema}
