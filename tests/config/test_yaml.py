"""Strict YAML reading: tags, duplicate keys, YAML 1.2 floats, line numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch.config._yaml import read_yaml
from hpsearch.errors import ConfigError


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1e-3", 1e-3),
        ("1.0e3", 1000.0),
        ("-2E+2", -200.0),
        (".5e-1", 0.05),
        ("3", 3),
        ("0.25", 0.25),
    ],
)
def test_numbers_read_as_yaml_1_2(tmp_path: Path, text: str, value: float) -> None:
    document = read_yaml(_write(tmp_path, f"v: {text}\n"))
    assert document.data["v"] == value
    assert type(document.data["v"]) is type(value)


def test_strings_that_look_numeric_stay_strings(tmp_path: Path) -> None:
    document = read_yaml(_write(tmp_path, "a: e5\nb: '1e-3'\nc: 1e\n"))
    assert document.data == {"a": "e5", "b": "1e-3", "c": "1e"}


def test_python_tags_are_rejected_with_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "a: 1\nb: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError) as info:
        read_yaml(path)
    assert info.value.line == 2
    assert "tag" in str(info.value)
    assert str(path) in str(info.value)


def test_duplicate_keys_are_rejected_with_both_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, "study:\n  name: a\n  n_trials: 3\n  name: b\n")
    with pytest.raises(ConfigError) as info:
        read_yaml(path)
    assert info.value.key == "study.name"
    assert info.value.line == 4
    assert "line 2" in str(info.value)


def test_same_key_in_different_mappings_is_fine(tmp_path: Path) -> None:
    document = read_yaml(_write(tmp_path, "a: {type: int}\nb: {type: float}\n"))
    assert document.data == {"a": {"type": "int"}, "b": {"type": "float"}}


def test_lines_are_recorded_per_key_path(tmp_path: Path) -> None:
    document = read_yaml(_write(tmp_path, "space:\n  lr:\n    low: 1\n  xs: [1, 2]\n"))
    assert document.lines[("space", "lr", "low")] == 3
    assert document.line_of(("space", "lr", "float", "low")) == 2  # nearest written ancestor
    assert document.lines[("space", "xs", 1)] == 4


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        read_yaml(tmp_path / "nope.yaml")


def test_syntax_error_has_a_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        read_yaml(_write(tmp_path, "a: [1, 2\nb: 3\n"))
    assert info.value.line is not None
    assert "invalid YAML" in str(info.value)
    assert str(info.value).endswith("; fix the syntax")


def test_a_tab_indent_is_told_to_be_spaces(tmp_path: Path) -> None:
    # An editor's tab: YAML reads it as a stray character, which says little.
    with pytest.raises(ConfigError) as info:
        read_yaml(_write(tmp_path, "study:\n\tname: s\n"))
    assert (info.value.line, info.value.fix) == (2, "indent with spaces, not tabs")


def test_a_command_with_placeholders_inside_braces_is_told_to_be_quoted(tmp_path: Path) -> None:
    # YAML reads the {lr} of train: {command: ... {lr}} as a mapping of its own.
    with pytest.raises(ConfigError) as info:
        read_yaml(_write(tmp_path, "study: {name: s}\ntrain: {command: python t.py --lr {lr}}\n"))
    assert (info.value.line, info.value.fix) == (
        2,
        'quote a command holding {placeholders} inside { }, e.g. train: {command: "python '
        'train.py --lr {lr}"}, or write it on lines of its own',
    )
    quoted = 'train: {command: "python t.py --lr {lr}"}\n'
    assert read_yaml(_write(tmp_path, quoted)).data == {
        "train": {"command": "python t.py --lr {lr}"}
    }
