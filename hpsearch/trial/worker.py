"""The Ray Tune trainable that runs one trial of the user's training function in a worker."""

from __future__ import annotations

import logging
import math
import os
import sys
import traceback
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hpsearch.entrypoint import resolve_train_function
from hpsearch.trial.context import TrialContext, TrialPruned, as_metric_value
from hpsearch.trial.protocol import (
    PARAMS_KEY,
    SPEC_KEY,
    EventKind,
    Outcome,
    TrialSpec,
    WorkerEvent,
)

logger = logging.getLogger(__name__)


def run_trial(config: dict[str, Any]) -> None:
    """Run ``train(params, ctx)`` for one trial and report its events to the driver.

    Every exception of the training function is caught here and reported as a
    failed trial with its traceback: the search goes on, and the driver records
    the error text in Optuna and MLflow.
    """
    import ray
    from ray import tune

    spec = TrialSpec.from_dict(config[SPEC_KEY])
    params = dict(config[PARAMS_KEY])
    assigned = _assigned_resources(ray)
    sent_assigned = False

    def send(event: WorkerEvent) -> None:
        # The first event of either kind carries the placement.
        nonlocal sent_assigned
        if not sent_assigned:
            event = replace(event, assigned=assigned)
            sent_assigned = True
        tune.report(event.to_result())

    def sink(step: int, metrics: dict[str, float]) -> None:
        send(WorkerEvent(kind=EventKind.REPORT, step=step, metrics=metrics))

    def gpu_load_sink(utilization_pct: float, memory_mb: float) -> None:
        send(
            WorkerEvent(
                kind=EventKind.GPU_LOAD,
                gpu_load={"utilization_pct": utilization_pct, "memory_mb": memory_mb},
            )
        )

    def knobs_sink(effective: dict[str, Any], notes: list[str]) -> None:
        send(WorkerEvent(kind=EventKind.KNOBS, info={"effective": effective, "notes": notes}))

    oracle = None
    if spec.decision_board:
        from hpsearch.runner.decision_board import wait_for_verdict

        def oracle(step: int) -> bool:
            verdict = wait_for_verdict(spec.decision_board, spec.number, step)
            if verdict is None:
                logger.warning(
                    "trial %d: no pruning verdict for step %d; going on", spec.number, step
                )
            return bool(verdict)

    outcome, error, final = _call_train(
        spec,
        params,
        assigned=assigned,
        sink=sink,
        oracle=oracle,
        gpu_load_sink=gpu_load_sink,
        knobs_sink=knobs_sink,
    )
    reason = {"reason": error} if outcome is Outcome.PRUNED and error else {}
    tune.report(
        WorkerEvent(
            kind=EventKind.END,
            outcome=outcome,
            error="" if outcome is Outcome.PRUNED else error,
            metrics=final,
            assigned=assigned,
            info=reason,
        ).to_result()
    )


def _call_train(
    spec: TrialSpec,
    params: dict[str, Any],
    *,
    assigned: dict[str, Any],
    sink: Any,
    oracle: Any,
    gpu_load_sink: Any,
    knobs_sink: Any = None,
) -> tuple[Outcome, str, dict[str, float]]:
    """Call the training function; return its outcome, error text and final metrics.

    For a pruned trial the text is the ``TrialPruned`` message, if it gave one.

    Only the formatted traceback leaves the ``except`` block: a live traceback
    keeps the failed frames (and their tensors) alive.
    """
    try:
        train = resolve_train_function(spec.train, source=spec.source)
        _limit_torch_threads(spec.cpus)
        ctx = TrialContext(
            trial_number=spec.number,
            device=_device(assigned),
            sink=sink,
            prune_oracle=oracle,
            resources={k: float(v) for k, v in assigned.items() if k in ("CPU", "GPU")},
            gpu_load_sink=gpu_load_sink,
            knobs_sink=knobs_sink,
        )
        returned = train(params, ctx)
        final = _final_metrics(returned, spec)
    except TrialPruned as pruned:
        return Outcome.PRUNED, str(pruned), {}
    except Exception:
        return Outcome.FAIL, traceback.format_exc(), {}
    return Outcome.COMPLETE, "", final


def _final_metrics(returned: Any, spec: TrialSpec) -> dict[str, float]:
    """Metrics from the training function's return value: none, a mapping, or one number."""
    if returned is None:
        return {}
    if isinstance(returned, Mapping):
        return {str(k): as_metric_value(str(k), v) for k, v in returned.items()}
    if len(spec.objectives) != 1:
        raise TypeError(
            f"train returned {type(returned).__name__} but the config has "
            f"{len(spec.objectives)} objectives; return a dict of metrics instead"
        )
    return {spec.objectives[0]: as_metric_value(spec.objectives[0], returned)}


def _assigned_resources(ray: Any) -> dict[str, Any]:
    context = ray.get_runtime_context()
    assigned: dict[str, Any] = {
        name: float(amount)
        for name, amount in context.get_assigned_resources().items()
        if name in ("CPU", "GPU")
    }
    assigned["gpu_ids"] = [str(i) for i in ray.get_gpu_ids()]
    assigned["node_id"] = context.get_node_id()
    assigned["pid"] = os.getpid()
    return assigned


def _device(assigned: dict[str, Any]) -> str:
    """``cuda`` when Ray gave this trial a GPU torch can use (Ray sets CUDA_VISIBLE_DEVICES)."""
    if not assigned.get("gpu_ids"):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _limit_torch_threads(cpus: float) -> None:
    """Keep torch's intra-op threads to the CPUs Ray reserved, so packed trials do not fight."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(max(1, math.floor(cpus)))
