"""Early stopping of trials: each reported step is judged in the driver, with a reason.

Ray's ``OptunaSearch`` never asks an Optuna pruner; hpsearch does, for every
step a trial reports (the verdict reaches the worker through
``ctx.should_prune()``). Three rules:

* one objective, an Optuna pruner (median, percentile, successive halving,
  hyperband): Optuna's own ``Trial.report``/``should_prune``;
* several objectives, an Optuna pruner: Optuna's pruners judge one value per
  step (``Trial.report`` refuses multi-objective studies), so the pruner judges
  the **primary** objective (the first listed), in a shadow single-objective
  study that mirrors this search's intermediate values;
* ``type: dominated`` (any number of objectives): a trial is pruned at a step
  when at least ``min_dominating`` other trials, at the same step, were at least
  as good on every objective and better on one.

Every verdict to prune comes with a sentence saying why, which the trial
ledger puts on the Optuna trial (and the MLflow mirror on the run).

The tree: ``_base`` (a verdict, the judge interface, the board interface),
``_optuna`` (Optuna's pruners as judges), ``_pruners`` (the table of Optuna's
pruners by name), ``_dominated`` (the dominated rule), ``_make`` (the judge a
config asks for), ``_board`` (verdicts on their way to workers), ``_pareto`` (dominance between
objective vectors: the dominated rule's, the Pareto front's, the view's).
"""

from typing import TYPE_CHECKING

from hpsearch._lazy import lazy_exports

# Imported on first use (hpsearch._lazy): a trial's worker reads the verdict board
# (``ray_board_lookup``, ``verdict_oracle``) without the judges' Optuna and config,
# a tenth of a second more in every worker a search starts.
if TYPE_CHECKING:
    from hpsearch.pruning._base import (
        KEEP,
        PruneJudge,
        Verdict,
        VerdictBoard,
        forget_intermediate,
        store_intermediate,
        stored_intermediate,
    )
    from hpsearch.pruning._board import (
        VERDICT_TIMEOUT_S,
        LocalVerdictBoard,
        RayVerdictBoard,
        VerdictBook,
        ray_board_lookup,
        verdict_oracle,
    )
    from hpsearch.pruning._dominated import DominatedJudge, DominatedRule
    from hpsearch.pruning._make import check_pruner, make_judge
    from hpsearch.pruning._optuna import OptunaJudge, PrimaryObjectiveJudge, explain
    from hpsearch.pruning._pareto import dominates
    from hpsearch.pruning._pruners import make_pruner

__getattr__, __dir__ = lazy_exports(__name__)

__all__ = [
    "KEEP",
    "VERDICT_TIMEOUT_S",
    "DominatedJudge",
    "DominatedRule",
    "LocalVerdictBoard",
    "OptunaJudge",
    "PrimaryObjectiveJudge",
    "PruneJudge",
    "RayVerdictBoard",
    "Verdict",
    "VerdictBoard",
    "VerdictBook",
    "check_pruner",
    "dominates",
    "explain",
    "forget_intermediate",
    "make_judge",
    "make_pruner",
    "ray_board_lookup",
    "store_intermediate",
    "stored_intermediate",
    "verdict_oracle",
]
