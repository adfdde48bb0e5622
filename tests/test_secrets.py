"""A URL's password is *** wherever hpsearch says or records the URL: error lines, the
parent run's params and its copy of the config."""

from __future__ import annotations

import optuna
import pytest

from hpsearch import interrupts
from hpsearch._secrets import without_passwords
from hpsearch.config import load_config
from hpsearch.errors import ConfigError, StudyError
from hpsearch.lifecycle._parent_run import ParentRun
from hpsearch.study import StudyHandle
from hpsearch.tracking import MemoryTracker
from tests.conftest import ConfigWriter


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://alice:s3cret@db:5432/optuna", "postgresql://alice:***@db:5432/optuna"),
        (
            "open 'postgresql+psycopg://a:b%40c@h/db' (x)",
            "open 'postgresql+psycopg://a:***@h/db' (x)",
        ),
        ("https://u:token@mlflow.example.com/#/x", "https://u:***@mlflow.example.com/#/x"),
        # Nothing to hide: no password, or no URL.
        ("mysql://root@h/db", "mysql://root@h/db"),
        ("http://127.0.0.1:5000/#/experiments/1", "http://127.0.0.1:5000/#/experiments/1"),
        ("sqlite:///runs@2/optuna.db", "sqlite:///runs@2/optuna.db"),
        ("user:x@host", "user:x@host"),
    ],
)
def test_a_urls_password_is_hidden_and_nothing_else_is_touched(text: str, shown: str) -> None:
    assert without_passwords(text) == shown


def test_an_error_line_shows_no_password() -> None:
    url = "postgresql://alice:s3cret@db/optuna"
    config_error = ConfigError("c.yaml", "study.storage", f"cannot open '{url}'", f"check {url}")
    assert "s3cret" not in str(config_error)
    assert "s3cret" not in config_error.alone  # validate's list of every problem
    assert str(StudyError(f"no study in {url}")) == "no study in postgresql://alice:***@db/optuna"


def test_the_parent_run_records_the_config_with_no_password(write_config: ConfigWriter) -> None:
    storage = "postgresql://alice:s3cret@db.example.com/optuna"
    path = write_config({"study": {"storage": storage}})
    config = load_config(path)
    study = optuna.create_study()
    tracker = MemoryTracker()
    ParentRun.start(config, StudyHandle(study, study._storage, []), tracker)
    [run] = tracker.runs.values()
    assert run.params["study.storage"] == "postgresql://alice:***@db.example.com/optuna"
    assert "s3cret" not in run.artifacts[f"config/{path.name}"]
    assert "alice:***@db.example.com" in run.artifacts[f"config/{path.name}"]


def test_the_line_a_stopped_search_exits_with_shows_no_password() -> None:
    # A tracking server gone too long stops the search with a line naming its URL.
    interrupts.clear_stop()
    interrupts.stop_for("tracking server https://u:token@mlflow.example.com gone", signal_now=False)
    try:
        assert interrupts.stopped_for() == "tracking server https://u:***@mlflow.example.com gone"
    finally:
        interrupts.clear_stop()
