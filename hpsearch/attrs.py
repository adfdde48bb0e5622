"""Names of what hpsearch stores on each Optuna trial (user attrs), shared by writer and readers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MLFLOW_RUN = "mlflow_run_id"
"""The trial's MLflow child run."""
MLFLOW_UNWRITTEN = "hpsearch.mlflow_unwritten"
"""On a trial whose MLflow run was never created (its search stopped while the tracking
server was out of reach): the search's parent run. The next search records the run from
the study."""
METRICS = "metrics"
"""Final value of every metric the trial reported."""
OUTCOME = "hpsearch.outcome"
"""complete, fail, pruned or interrupted."""
ERROR = "hpsearch.error"
"""Why a trial failed: the exception and traceback, or what was missing."""
RESOURCES = "hpsearch.resources"
"""What the resource policy gave the trial: cpus, gpus, reason."""
ASSIGNED = "hpsearch.assigned"
"""What Ray assigned to the trial's worker: CPU, GPU, gpu_ids, node_id, pid."""
GPU = "hpsearch.gpu"
"""The trial's GPU record: GPUs and their samples, co-tenant trials, summary metrics."""
DURATION = "hpsearch.duration_s"
"""Seconds from the worker's start to the trial's end."""
PRUNED_AT = "hpsearch.pruned_at_step"
"""The step at which the pruner stopped the trial."""
PRUNE_REASON = "hpsearch.prune_reason"
"""Why the trial was pruned: the pruner's rule and figures, or the trial's own message."""
INTERMEDIATE = "hpsearch.intermediate"
"""Objective values per reported step (``{"3": {"val_accuracy": 0.9}}``), kept by the
multi-objective pruning rules since Optuna keeps none for multi-objective studies."""
KNOBS = "hpsearch.knobs"
"""The throughput knobs in effect (``effective``) and why any differ from the params (``notes``)."""
RETRY_OF = "hpsearch.retry_of"
"""On a trial re-running an interrupted one: the interrupted trial's number."""
OOM = "hpsearch.oom"
"""A trial that ran out of memory: kind, message, step, peak_mb, cap_mb, gpus, co_tenants,
infeasible, retries; or ``predicted_from`` for a suggestion not launched (``predicted_oom``)."""
INFEASIBLE = "hpsearch.infeasible"
"""True on a configuration judged unable to fit (the sampler is told by a constraint)."""
OOM_RETRIES = "hpsearch.oom_retries"
"""Smaller-batch retries after running out of memory (``oom.action: retry_smaller_batch``):
step, batch_size, retry_batch_size, retry_grad_accum_steps of each."""
ALONE_RETRY_OF = "hpsearch.alone_retry_of"
"""On a trial re-running, alone on a whole GPU, one that ran out under a shared cap."""
SEED = "hpsearch.seed"
"""The trial's seed (``ctx.seed``); a re-run of an interrupted trial keeps it."""
CHECKPOINT_DIR = "hpsearch.checkpoint_dir"
"""The trial's checkpoint folder: its own, or, on a re-run of an interrupted trial, the
interrupted trial's (so it resumes from its checkpoint)."""
RESUMES_RUN = "hpsearch.resumes_run"
"""On a re-run of an interrupted trial: the MLflow run of the interrupted attempt."""
RESUMES_METRICS = "hpsearch.resumes_metrics"
"""On a re-run of an interrupted trial: what the interrupted attempt had reported last.
The re-run starts from them, as Ray Tune's restored trial keeps its last result: one
resumed from a checkpoint taken after its last step has nothing left to report."""
FUSED_GROUP = "hpsearch.fused_group"
"""On a fused trial: ``{group, members}``, its group's first trial number and its size."""


def code_attrs(user_attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The user attrs a trial's own code set (an Optuna objective's ``set_user_attr``):
    all but hpsearch's."""
    return {
        key: value
        for key, value in user_attrs.items()
        if not key.startswith("hpsearch.") and key not in (MLFLOW_RUN, METRICS)
    }
