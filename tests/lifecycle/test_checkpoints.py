"""The checkpoints a search keeps at its end: the best trials', in a constrained study too."""

from __future__ import annotations

from pathlib import Path

import optuna

from hpsearch import attrs
from hpsearch.lifecycle import sweep_checkpoints


def _study(folder: Path, constraints: list[float]) -> optuna.Study:
    """Complete trials of values 1, 2, ..., each with a checkpoint folder and a constraint."""
    study = optuna.create_study(direction="maximize")
    for number, constraint in enumerate(constraints):
        trial = study.ask()
        (folder / str(number)).mkdir()
        trial.set_user_attr(attrs.CHECKPOINT_DIR, str(folder / str(number)))
        trial.set_constraint("c", constraint)  # Optuna's: held at 0 or less
        study.tell(trial, float(number + 1))
    return study


def test_the_best_feasible_trials_checkpoints_are_kept(tmp_path: Path) -> None:
    study = _study(tmp_path, [0.0, 0.0, 1.0])  # the highest value breaks its constraint
    assert sweep_checkpoints(study, str(tmp_path), study.trials) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1"]


def test_where_every_trial_breaks_a_constraint_none_is_swept(tmp_path: Path) -> None:
    # No best trial to keep: Optuna has none, and which one a rerun wants is not known.
    study = _study(tmp_path, [1.0, 2.0])
    assert sweep_checkpoints(study, str(tmp_path), study.trials) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0", "1"]
