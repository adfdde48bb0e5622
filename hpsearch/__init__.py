"""hpsearch: hyperparameter search for PyTorch that knows how busy its GPUs are.

Optuna decides what to try, Ray Tune runs the trials, MLflow shows them.

    import hpsearch
    outcome = hpsearch.run("configs/phase1.yaml")      # or: hpsearch run configs/phase1.yaml
    best = hpsearch.load("configs/phase1.yaml").best_trial

A training function is ``train(params: dict, ctx: hpsearch.TrialContext)``; one that trains
several trials fused is ``train_members(members: list[hpsearch.Member])`` (``hpsearch.fused``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from hpsearch.errors import ConfigError, HpsearchError

if TYPE_CHECKING:
    from hpsearch.adapters import Member, fused
    from hpsearch.api import RunOutcome, run
    from hpsearch.results import StudyResults, TrialResult, load
    from hpsearch.trial.context import TrialContext, TrialPruned

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "HpsearchError",
    "Member",
    "RunOutcome",
    "StudyResults",
    "TrialContext",
    "TrialPruned",
    "TrialResult",
    "__version__",
    "fused",
    "load",
    "run",
]

# Each name is imported where it lives when first used: a trial worker, `hpsearch
# --help` or a training function importing TrialPruned pays for none of Ray, MLflow,
# pandas or plotly.
_LAZY = {
    "run": "hpsearch.api",
    "RunOutcome": "hpsearch.api",
    "load": "hpsearch.results",
    "StudyResults": "hpsearch.results",
    "TrialResult": "hpsearch.results",
    "TrialContext": "hpsearch.trial.context",
    "TrialPruned": "hpsearch.trial.context",
    "Member": "hpsearch.adapters",
    "fused": "hpsearch.adapters",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hpsearch' has no attribute {name!r}")
    return getattr(import_module(module), name)
