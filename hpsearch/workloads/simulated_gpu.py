"""A modelled training run on a modelled GPU: searches against simulated GPUs, end to end, anywhere.

Use it as ``train: hpsearch.workloads.simulated_gpu:train`` with
``telemetry: {backend: simulated}``. From its parameters it computes what a
small MLP-like job would do on a laptop GPU (the seeds' RTX 4050): its
utilisation, its device memory and its step time (:func:`gpu_profile`). It
declares that load (``ctx.simulate_gpu_load``), sleeps for the modelled step
time, and reports a modelled validation accuracy that depends on capacity and
learning rate, so a sampler has something real to find. No GPU; torch only
to raise its out-of-memory error.

Out of memory: when the modelled memory exceeds what the trial has (its GPU's
memory, ``ctx.gpu_memory_mb``, as the search's telemetry reads it: a simulated
GPU's declared size; or its cap, ``ctx.memory_cap_mb``, set when it shares its
GPU; or ``memory_budget_mb`` when the space sets one), the first step raises the real
``torch.cuda.OutOfMemoryError``, as the allocation would on a GPU. With
``grad_accum_steps`` the micro-batch sets the memory and the effective batch
(``batch_size * grad_accum_steps``) the accuracy, as in a real loop.

The model, per step: the GPU computes for ``0.4 ms + 6·batch·width²·depth / 2e8``
ms (a fixed kernel-launch floor, then the flops); the input pipeline takes
``3 ms + 0.002 ms × batch`` during which the GPU waits. Utilisation is the
compute share of the step. Memory is the CUDA context (``context_mb``, 500 MiB
by default: ``hpsearch.telemetry.CUDA_CONTEXT_MB``), 16 bytes per weight
(weight, gradient, two Adam moments) and 32 bytes per activation. The kernels
occupy the share of the GPU's SMs their output tiles fill: ``ceil(batch/128) ×
ceil(width/64)`` tiles of a 20-SM laptop GPU (what MPS can overlap). The
trial keeps ``1 + num_workers`` CPUs busy.

When it shares a GPU, how much it slows is the simulated GPU's business (the
sharing model in ``hpsearch.telemetry``); :func:`plan` gives the solo speed.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from hpsearch.adapters import Member, fused
from hpsearch.oom import OomReport
from hpsearch.simulation import (
    CUDA_CONTEXT_MB,
    GroupPlan,
    PlannedEpoch,
    TrialPlan,
    tightest_limit,
)
from hpsearch.telemetry import GpuLoad, solo_name
from hpsearch.trial.context import TrialContext, TrialPruned
from hpsearch.workloads import _params

DEFAULTS: dict[str, Any] = {
    "epochs": 5,
    "steps_per_epoch": 20,
    "batch_size": 64,
    "grad_accum_steps": 1,
    "width": 256,
    "depth": 2,
    "lr": 3e-3,
    "seed": 0,
    "time_scale": 1.0,
    "memory_budget_mb": None,
    "context_mb": CUDA_CONTEXT_MB,
    "num_workers": 0,
    "utilization_pct": None,
    "memory_mb": None,
    "sm_share": None,
    "cpus": None,
    "cold_start_s": 0.0,
}
"""Every parameter the workload reads, and its value when the space leaves it out.

``time_scale`` multiplies the time actually slept (0.5 runs twice as fast as modelled).
``memory_budget_mb``, when given, is a memory budget of the trial's own, below its GPU's.
``utilization_pct``, ``memory_mb`` (the whole process, context included) and
``sm_share``, when given, replace the modelled ones (a scripted load: the seeds'
11% and 167 MiB, a saturating job, a memory-heavy one); so does ``cpus``, the
CPUs the trial keeps busy (``1 + num_workers`` by default: a loop that waits on
a GPU or a network keeps less than one busy).
``cold_start_s`` is what a new worker process spends before the trial's first
step (imports, the CUDA context, first compilations): the first trial each
worker runs pays it, with its load already on the GPU (the H200 main job's first
trial took 6 s where the next took 0.6 to 1.9).
"""

_MIB = 1024 * 1024
_SPEEDS = ("samples_per_sec",)
_DURATIONS = ("step_time_ms", "epoch_seconds")
_TILE_ROWS, _TILE_COLUMNS, _SMS = 128, 64, 20


@dataclass(frozen=True)
class GpuProfile:
    """What one configuration does to its GPU, per the model in the module docstring."""

    utilization_pct: float
    memory_mb: float
    step_time_s: float
    samples_per_sec: float
    sm_share: float = 1.0


def gpu_profile(
    batch_size: int, width: int, depth: int, context_mb: float = CUDA_CONTEXT_MB
) -> GpuProfile:
    """The modelled utilisation, memory, step time and SM share of one configuration."""
    flops = 6.0 * batch_size * width * width * depth
    compute_ms = 0.4 + flops / 2e8
    input_ms = 3.0 + 0.002 * batch_size
    step_ms = compute_ms + input_ms
    weights = width * width * depth
    activations = batch_size * width * depth
    memory = context_mb + (16 * weights + 32 * activations) / _MIB
    tiles = math.ceil(batch_size / _TILE_ROWS) * math.ceil(width / _TILE_COLUMNS)
    return GpuProfile(
        utilization_pct=100.0 * compute_ms / step_ms,
        memory_mb=memory,
        step_time_s=step_ms / 1000,
        samples_per_sec=batch_size / (step_ms / 1000),
        sm_share=min(1.0, tiles / _SMS),
    )


def final_accuracy(batch_size: int, width: int, depth: int, lr: float) -> float:
    """The accuracy a configuration converges to: capacity, less a learning-rate penalty."""
    capacity = 0.985 - 0.3 * math.exp(-width * depth / 400)
    best_lr = 3e-3 * math.sqrt(batch_size / 64)  # larger batches want larger steps
    penalty = 0.08 * (math.log10(lr) - math.log10(best_lr)) ** 2
    return min(0.99, max(0.1, capacity - penalty))


def resolve_params(params: dict[str, Any]) -> dict[str, Any]:
    """The workload's parameters: ``params`` over :data:`DEFAULTS`; unknown names are an error."""
    return _params.resolve_params(params, DEFAULTS, "simulated_gpu")


def plan(
    params: dict[str, Any],
    gpu_memory_mb: float | None = None,
    memory_cap_mb: float | None = None,
) -> TrialPlan:
    """The modelled run of a trial with ``params`` on its GPU: its load and reports.

    ``train`` plays this plan in real time; the simulated-time runner plays it on
    a virtual clock (``hpsearch.runner.SimulatedRunner``).

    Args:
        params: the trial's parameters.
        gpu_memory_mb: the memory its GPU leaves it (``None``: no GPU, or unknown).
        memory_cap_mb: its cap when it shares the GPU (``None``: none).
    """
    p = resolve_params(params)
    batch, width, depth = int(p["batch_size"]), int(p["width"]), int(p["depth"])
    lr, epochs, steps = float(p["lr"]), int(p["epochs"]), int(p["steps_per_epoch"])
    scale = float(p["time_scale"])
    profile = gpu_profile(batch, width, depth, float(p["context_mb"]))
    if p["utilization_pct"] is not None:
        profile = replace(profile, utilization_pct=float(p["utilization_pct"]))
    if p["memory_mb"] is not None:
        profile = replace(profile, memory_mb=float(p["memory_mb"]))
    if p["sm_share"] is not None:
        profile = replace(profile, sm_share=float(p["sm_share"]))
    cpus = 1.0 + int(p["num_workers"]) if p["cpus"] is None else float(p["cpus"])
    cold = float(p["cold_start_s"]) * scale
    limit = tightest_limit(p["memory_budget_mb"], gpu_memory_mb, memory_cap_mb)
    if limit is not None and profile.memory_mb > limit:
        # Memory fills to the limit, then the allocation fails at once, not after a step.
        message = (
            f"CUDA out of memory. Tried to allocate {profile.memory_mb - limit:.0f} MiB "
            f"(simulated: {profile.memory_mb:.0f} MiB needed, {limit:.0f} MiB available)"
        )
        return TrialPlan(
            load=GpuLoad(profile.utilization_pct, limit, profile.sm_share, cpus),
            oom=OomReport("torch", message, peak_mb=limit, cap_mb=memory_cap_mb),
            oom_after_s=min(profile.step_time_s, 0.5) * scale,
            cpus=cpus,
            cold_start_s=cold,
        )
    effective = batch * int(p["grad_accum_steps"])
    target = final_accuracy(effective, width, depth, lr)
    # Learning speed: a good learning rate converges in fewer epochs.
    speed = 3.0 / (1 + abs(math.log10(lr / (3e-3 * math.sqrt(effective / 64)))))
    rng = random.Random(f"{p['seed']}-{batch}-{width}-{depth}-{lr:.6g}")
    seconds = steps * profile.step_time_s * scale
    reports = []
    for epoch in range(epochs):
        progress = 1 - math.exp(-speed * (epoch + 1) / epochs * 2)
        accuracy = 0.1 + (target - 0.1) * progress + rng.gauss(0, 0.004)
        metrics = {
            "val_accuracy": min(1.0, max(0.0, accuracy)),
            "samples_per_sec": profile.samples_per_sec,
            "step_time_ms": 1000 * profile.step_time_s,
            "epoch_seconds": seconds,
        }
        reports.append(PlannedEpoch(seconds, metrics, _SPEEDS, _DURATIONS))
    load = GpuLoad(profile.utilization_pct, profile.memory_mb, profile.sm_share, cpus)
    return TrialPlan(load=load, epochs=tuple(reports), cpus=cpus, cold_start_s=cold)


PACE_CHECK_S = 0.1
"""How often a trial playing in real time asks its simulated GPU how fast it runs."""
_started_here = False
"""Whether this worker process has run a trial (the next one starts warm)."""


def _cold_start(seconds: float) -> None:
    """A new worker's start-up, once per process (``cold_start_s``)."""
    global _started_here  # noqa: PLW0603 - what the process has done, as its state is
    if not _started_here and seconds > 0:
        time.sleep(seconds)
    _started_here = True


def _play(seconds: float, share: Callable[[], float]) -> float:
    """Sleep through ``seconds`` of solo work at the pace ``share`` gives; the time it took."""
    remaining, spent = seconds, 0.0
    while remaining > 1e-9:
        pace = max(0.01, min(1.0, share()))
        step = min(PACE_CHECK_S, remaining / pace)
        time.sleep(step)
        spent += step
        remaining -= step * pace
    return spent


def train(params: dict[str, Any], ctx: TrialContext) -> None:
    """Play the modelled epochs in real time, reporting each; stop early when pruned.

    Trials that share a simulated GPU (``telemetry.simulated.source: load``) run
    at the pace its sharing model gives them, as in the simulated-time runner.
    """
    planned = plan(params, ctx.gpu_memory_mb, ctx.memory_cap_mb)
    if planned.load is not None:
        load = planned.load
        ctx.simulate_gpu_load(
            load.utilization_pct, load.memory_mb, sm_share=load.sm_share, cpus=load.cpus
        )
    _cold_start(planned.cold_start_s)
    if planned.oom is not None:
        import torch

        time.sleep(planned.oom_after_s)
        raise torch.cuda.OutOfMemoryError(planned.oom.message)
    for epoch, planned_epoch in enumerate(planned.epochs):
        started = time.perf_counter()
        spent = _play(planned_epoch.seconds, ctx.simulated_speed_share)
        metrics = planned_epoch.slowed(spent)
        ctx.report(epoch, **{**metrics, "epoch_seconds": time.perf_counter() - started})
        if ctx.should_prune():
            raise TrialPruned(f"pruned after epoch {epoch}")


SHARED = (*(name for name in DEFAULTS if name not in {"lr", "seed"}), "num_workers")
"""What a fused group's members share: every parameter but the learning rate and seed."""


@fused(shared=SHARED)
def train_members(members: list[Member]) -> None:
    """Play a fused group's modelled epochs in real time (``fusion.train``).

    The group holds one CUDA context and its members' weights and activations;
    it runs out of memory, as one, when that exceeds the GPU's. Each epoch takes
    the solo epoch times the sharing model's fused slowdown for the members
    still training (:class:`~hpsearch.simulation.GroupPlan`). Each member reports its
    measured speed (its share of the group's) and the solo twin of every speed
    metric (``samples_per_sec_solo``: what its configuration does alone, the
    model's own figure), so an objective on speed compares trials as if each
    had run alone.
    """
    first = members[0].ctx
    group = GroupPlan(
        tuple(plan(m.params, m.ctx.gpu_memory_mb, m.ctx.memory_cap_mb) for m in members),
        limit_mb=tightest_limit(first.gpu_memory_mb, first.memory_cap_mb),
        context_mb=float(resolve_params(members[0].params)["context_mb"]),
    )
    load = group.load()
    if load is not None:
        first.simulate_gpu_load(
            load.utilization_pct, load.memory_mb, sm_share=load.sm_share, cpus=load.cpus
        )
    _cold_start(group.plans[0].cold_start_s)
    if group.oom is not None:
        import torch

        time.sleep(group.oom_after_s)
        raise torch.cuda.OutOfMemoryError(group.oom.message)
    for epoch in range(len(group.plans[0].epochs)):
        open_members = [(m, p) for m, p in zip(members, group.plans, strict=True) if m.active]
        if not open_members:
            return
        slowdown = group.slowdown(len(open_members))
        solo = open_members[0][1].epochs[epoch]
        started = time.perf_counter()
        spent = _play(solo.seconds * slowdown, members[0].ctx.simulated_speed_share)
        took = time.perf_counter() - started
        for member, planned in open_members:
            mine = planned.epochs[epoch]
            metrics = mine.slowed(spent)
            twins = {solo_name(name): mine.metrics[name] for name in mine.speeds + mine.durations}
            member.ctx.report(epoch, **{**metrics, **twins, "epoch_seconds": took})
            if member.ctx.should_prune():
                member.prune(f"pruned after epoch {epoch}")
