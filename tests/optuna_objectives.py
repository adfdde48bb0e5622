"""Optuna objectives as Optuna users write them (no hpsearch import), for the tests."""

from __future__ import annotations

from typing import Any, cast

import optuna


def objective(trial: optuna.Trial) -> float:
    """Suggests its own space; reports each step; prunes itself on one branch."""
    x = trial.suggest_float("x", 0.0, 1.0)
    kind = trial.suggest_categorical("kind", ["a", "b"])
    if kind == "b":
        trial.suggest_int("depth", 1, 3)  # a parameter of one branch only
    for step in range(3):
        trial.report(x * (step + 1) / 3, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    if x > 0.9:
        raise optuna.TrialPruned("x too large")
    trial.set_user_attr("kind_seen", kind)
    assert trial.params["x"] == x
    return x


def two(trial: optuna.Trial) -> tuple[float, float]:
    """Two objectives, as a tuple; a choice among functions, as Optuna's in-memory studies
    take them (``[nn.ReLU, nn.Tanh]``)."""
    x = trial.suggest_float("x", 0.0, 1.0)
    # Optuna's types name only storable choices; its in-memory studies take these too.
    rounding = cast(Any, trial).suggest_categorical("rounding", [abs, float])
    assert rounding in (abs, float)  # the function itself
    return rounding(x), 1.0 - x


def runs_out(trial: optuna.Trial) -> float:
    """Runs out of GPU memory on one branch, as a too-large model would."""
    import torch

    size = trial.suggest_categorical("size", ["small", "large"])
    trial.suggest_float("x", 0.0, 1.0)
    if size == "large":
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return 1.0


def stops(trial: optuna.Trial) -> float:
    """Ends the study's optimize from its second trial on, as ``study.stop()`` lets it."""
    x = trial.suggest_float("x", 0.0, 1.0)
    if trial.number >= 1:
        trial.study.stop()
    return x
