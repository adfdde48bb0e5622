"""The Ray Tune trainable that runs one trial of the user's training function in a worker."""

from __future__ import annotations

import gc
import logging
import math
import os
import sys
import traceback
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hpsearch.entrypoint import resolve_train_function
from hpsearch.oom import device_oom
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
    if spec.gpu_index is not None:
        _use_gpu(spec.gpu_index, assigned)
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

    outcome, error, final, info = _call_train(
        spec,
        params,
        assigned=assigned,
        sink=sink,
        oracle=oracle,
        gpu_load_sink=gpu_load_sink,
        knobs_sink=knobs_sink,
    )
    if outcome is Outcome.PRUNED and error:
        info["reason"] = error
    tune.report(
        WorkerEvent(
            kind=EventKind.END,
            outcome=outcome,
            error="" if outcome is Outcome.PRUNED else error,
            metrics=final,
            assigned=assigned,
            info=info,
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
) -> tuple[Outcome, str, dict[str, float], dict[str, Any]]:
    """Call the training function; return its outcome, error text, final metrics and info.

    For a pruned trial the text is the ``TrialPruned`` message, if it gave one. A
    trial that runs out of GPU memory ends PRUNED with ``info["oom"]``; with
    ``oom_action: retry_smaller_batch`` it is first run again with the batch
    halved and gradient accumulation doubled (``info["retries"]``).
    """
    try:
        train = resolve_train_function(spec.train, source=spec.source)
        _limit_torch_threads(spec.cpus)
    except Exception:
        return Outcome.FAIL, traceback.format_exc(), {}, {}
    device = _device(assigned)
    cap_mb = _apply_memory_cap(spec, device)
    attempt = dict(params)
    retries: list[dict[str, Any]] = []
    while True:
        ctx = TrialContext(
            trial_number=spec.number,
            device=device,
            sink=sink,
            prune_oracle=oracle,
            resources={k: float(v) for k, v in assigned.items() if k in ("CPU", "GPU")},
            gpu_load_sink=gpu_load_sink,
            knobs_sink=knobs_sink,
            memory_cap_mb=cap_mb,
        )
        outcome, error, final, oom = _attempt(train, attempt, ctx, spec)
        if oom is None:
            return outcome, error, final, ({"retries": retries} if retries else {})
        # Out of the except block (whose traceback held the failed frames' tensors),
        # the memory can be given back before anything else runs in this process.
        oom["peak_mb"] = _release_memory(device, ctx)
        oom["cap_mb"] = cap_mb
        smaller = _halved(attempt) if spec.oom_action == "retry_smaller_batch" else None
        if smaller is None or len(retries) >= spec.max_halvings:
            return Outcome.PRUNED, "", {}, {"oom": oom, "retries": retries}
        logger.warning(
            "trial %d: out of GPU memory at batch_size %s; retrying with %s",
            spec.number,
            attempt["batch_size"],
            smaller["batch_size"],
        )
        retries.append(
            {
                "step": oom["step"],
                "batch_size": attempt["batch_size"],
                "retry_batch_size": smaller["batch_size"],
                "retry_grad_accum_steps": smaller.get("grad_accum_steps"),
            }
        )
        attempt = smaller


def _attempt(
    train: Any, params: dict[str, Any], ctx: TrialContext, spec: TrialSpec
) -> tuple[Outcome, str, dict[str, float], dict[str, Any] | None]:
    """One run of the training function; the last item describes an out-of-memory, if any.

    Only text leaves the ``except`` blocks: a live traceback keeps the failed
    frames (and their tensors) alive.
    """
    try:
        returned = train(params, ctx)
        final = _final_metrics(returned, spec)
    except TrialPruned as pruned:
        return Outcome.PRUNED, str(pruned), {}, None
    except Exception as exc:
        kind = device_oom(exc)
        if kind is None:
            return Outcome.FAIL, traceback.format_exc(), {}, None
        message = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        return Outcome.PRUNED, "", {}, {"kind": kind, "message": message, "step": ctx.last_step}
    return Outcome.COMPLETE, "", final, None


def _halved(params: dict[str, Any]) -> dict[str, Any] | None:
    """``params`` with the micro-batch halved and accumulation doubled; ``None`` if it cannot be."""
    batch = params.get("batch_size")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 2 or batch % 2:
        return None
    smaller = {**params, "batch_size": batch // 2}
    if "effective_batch_size" not in params:  # the toolkit derives accumulation from it
        smaller["grad_accum_steps"] = int(params.get("grad_accum_steps", 1)) * 2
    return smaller


def _apply_memory_cap(spec: TrialSpec, device: str) -> float | None:
    """Hold a trial that shares a GPU to its share of the memory; return the cap in MiB.

    Set on every trial, whole GPU included: a reused worker keeps the previous
    trial's fraction otherwise. Without a real GPU, the driver's cap (from the
    simulated GPU's memory) is passed on for the workload to honour.
    """
    if device != "cuda":
        return spec.memory_cap_mb
    import torch

    fraction = spec.gpus if 0 < spec.gpus < 1 else 1.0
    torch.cuda.set_per_process_memory_fraction(fraction)
    torch.cuda.reset_peak_memory_stats()
    if fraction >= 1.0:
        return None
    return fraction * torch.cuda.get_device_properties(0).total_memory / 2**20


def _release_memory(device: str, ctx: TrialContext) -> float | None:
    """Free what the failed attempt left; return its peak memory in MiB (``None`` if unknown)."""
    gc.collect()
    if device == "cuda":
        import torch

        peak = torch.cuda.max_memory_allocated() / 2**20
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        return peak
    return ctx.declared_memory_mb


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


def _use_gpu(index: int, assigned: dict[str, Any]) -> None:
    """Run on GPU ``index`` of this node, the one the packing policy chose.

    Ray fills its GPU 0 first; the policy spreads trials, so its choice replaces
    Ray's before CUDA starts in this process. A reused worker keeps the GPU CUDA
    first saw, which is why a placed trial's Ray request names its GPU (see
    ``trial_resources``) and Tune reuses workers only within one GPU.
    """
    torch = sys.modules.get("torch")
    started = torch is not None and torch.cuda.is_initialized()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if started and visible != str(index):
        logger.warning(
            "CUDA already started on GPU(s) %s in this worker; the trial stays there, "
            "not on GPU %d",
            visible,
            index,
        )
        return
    os.environ["CUDA_VISIBLE_DEVICES"] = str(index)
    assigned["ray_gpu_ids"] = assigned.get("gpu_ids", [])
    assigned["gpu_ids"] = [str(index)]


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
