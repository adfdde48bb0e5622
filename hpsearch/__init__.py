"""hpsearch: hyperparameter search for PyTorch that knows how busy its GPUs are.

Optuna decides what to try, Ray Tune runs the trials, MLflow shows them.

    import hpsearch
    outcome = hpsearch.run("configs/phase1.yaml")      # or: hpsearch run configs/phase1.yaml
    best = hpsearch.load("configs/phase1.yaml").best_trial

A training function is ``train(params: dict, ctx: hpsearch.TrialContext)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hpsearch.errors import ConfigError, HpsearchError
from hpsearch.results import StudyResults, TrialResult, load
from hpsearch.trial.context import TrialContext, TrialPruned

if TYPE_CHECKING:
    from hpsearch.api import RunOutcome, run

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "HpsearchError",
    "RunOutcome",
    "StudyResults",
    "TrialContext",
    "TrialPruned",
    "TrialResult",
    "__version__",
    "load",
    "run",
]


def __getattr__(name: str) -> Any:
    # Ray and MLflow take seconds to import; only a search needs them, not
    # `hpsearch validate`, `hpsearch best` or a training function importing TrialPruned.
    if name in ("run", "RunOutcome"):
        from hpsearch import api

        return getattr(api, name)
    raise AttributeError(f"module 'hpsearch' has no attribute {name!r}")
