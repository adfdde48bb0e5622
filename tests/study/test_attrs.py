"""Trial attributes written several at once, and after the fact."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.exceptions import UpdateFinishedTrialError

from hpsearch.study import _attrs, set_user_attr_late, set_user_attrs


def _storage(tmp_path: Path, storage: str, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """The study's URL; ``sqlite-orm``: SQLite written as a database with no upsert is
    (MySQL), row by row through the ORM."""
    if storage == "sqlite-orm":
        monkeypatch.setattr(_attrs, "_upsert", lambda *_: None)
    return f"sqlite:///{tmp_path / 'o.db'}" if storage.startswith("sqlite") else None


@pytest.mark.parametrize("storage", ["sqlite", "sqlite-orm", "memory"])
def test_an_attribute_known_only_after_its_trial_ended_is_recorded_where_storage_allows(
    tmp_path: Path, storage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _storage(tmp_path, storage, monkeypatch)
    study = optuna.create_study(storage=url, study_name="s")
    trial = study.ask()
    set_user_attr_late(study._storage, trial, "run", "pending")  # running: Optuna's own setter
    study.tell(trial, 1.0)
    set_user_attr_late(study._storage, trial, "run", "abc")  # ended: Optuna refuses; written
    set_user_attr_late(study._storage, study.trials[0], "other", 3)

    if url is not None:
        # A new process reads it from the database.
        assert url is not None
        stored = optuna.load_study(study_name="s", storage=url).trials[0].user_attrs
        assert stored == {"run": "abc", "other": 3}
    else:
        # In memory there is no way round Optuna's check: skipped, not raised.
        assert study.trials[0].user_attrs == {"run": "pending"}


@pytest.mark.parametrize("storage", ["sqlite", "sqlite-orm", "memory"])
def test_several_attributes_are_written_at_once_over_earlier_ones_and_not_on_an_ended_trial(
    tmp_path: Path, storage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _storage(tmp_path, storage, monkeypatch)
    study = optuna.create_study(storage=url, study_name="s")
    trial = study.ask()
    trial.set_user_attr("seed", 1)

    set_user_attrs(trial, {"seed": 7, "resources": {"cpus": 1.0, "gpus": 0.5}, "note": None})

    expected = {"seed": 7, "resources": {"cpus": 1.0, "gpus": 0.5}, "note": None}
    assert trial.user_attrs == expected  # the live trial knows them
    if url is not None:
        assert optuna.load_study(study_name="s", storage=url).trials[0].user_attrs == expected
    study.tell(trial, 1.0)
    with pytest.raises(UpdateFinishedTrialError):  # as Optuna's own setter refuses
        set_user_attrs(trial, {"seed": 8, "late": True})
    assert study.trials[0].user_attrs == expected
