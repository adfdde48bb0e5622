"""The config's JSON Schema: what editors check YAML against, generated so it cannot drift."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from hpsearch.config import config_schema
from hpsearch.config._yaml import read_yaml
from tests.conftest import REPO_ROOT

SCHEMA_FILE = REPO_ROOT / "docs" / "reference" / "config.schema.json"
SHIPPED = sorted(REPO_ROOT.glob("configs/*.yaml")) + sorted(
    REPO_ROOT.glob("examples/*/config.yaml")
)


def test_the_committed_schema_is_the_one_the_code_gives() -> None:
    # Regenerate with: hpsearch schema > docs/reference/config.schema.json
    assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8")) == config_schema()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_shipped_config_names_the_schema_and_validates_against_it(path: Path) -> None:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema=")
    named = (path.parent / first.partition("$schema=")[2]).resolve()
    assert named == SCHEMA_FILE.resolve()
    validator = jsonschema.Draft202012Validator(config_schema())
    assert [e.message for e in validator.iter_errors(read_yaml(path).data)] == []


def test_the_schema_refuses_what_the_config_refuses() -> None:
    validator = jsonschema.Draft202012Validator(config_schema())
    study = {"name": "s", "n_trials": 2, "timeout": "15m"}
    config: dict[str, object] = {
        "study": study,
        "objective": {"metric": "acc", "direction": "maximize"},
        "train": "mypkg.train:train",
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 0.1}, "width": [16, 32]},
    }
    assert list(validator.iter_errors(config)) == []
    for broken in (
        {**config, "studdy": {}},  # an unknown key
        {**config, "study": {**study, "timeout": "soon"}},  # not a duration
        {**config, "train": "not a function name"},
    ):
        assert list(validator.iter_errors(broken)), broken
