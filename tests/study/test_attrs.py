"""Trial attributes written after the fact."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from hpsearch.study import set_user_attr_late


@pytest.mark.parametrize("storage", ["sqlite", "memory"])
def test_an_attribute_known_only_after_its_trial_ended_is_recorded_where_storage_allows(
    tmp_path: Path, storage: str
) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}" if storage == "sqlite" else None
    study = optuna.create_study(storage=url, study_name="s")
    trial = study.ask()
    set_user_attr_late(study._storage, trial, "run", "pending")  # running: Optuna's own setter
    study.tell(trial, 1.0)
    set_user_attr_late(study._storage, trial, "run", "abc")  # ended: Optuna refuses; written
    set_user_attr_late(study._storage, study.trials[0], "other", 3)

    if storage == "sqlite":
        # A new process reads it from the database.
        assert url is not None
        stored = optuna.load_study(study_name="s", storage=url).trials[0].user_attrs
        assert stored == {"run": "abc", "other": 3}
    else:
        # In memory there is no way round Optuna's check: skipped, not raised.
        assert study.trials[0].user_attrs == {"run": "pending"}
