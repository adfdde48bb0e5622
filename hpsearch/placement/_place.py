"""Where a new trial goes: the GPU with the most room relative to its limit."""

from __future__ import annotations

from hpsearch.placement._views import GpuDecision, GpuKey, PackingView, Placement


def place(
    view: PackingView,
    decisions: dict[GpuKey, GpuDecision],
    *,
    whole_gpu: bool = False,
) -> Placement | None:
    """The GPU a new trial goes to, or ``None`` when none has room now.

    The GPU with the most room relative to its limit wins (fewest trials, then
    the lowest utilisation, then the lowest index), so trials spread over GPUs
    instead of filling GPU 0 first. ``whole_gpu``: only an empty GPU, whole.
    """
    candidates = []
    for gpu in view.gpus:
        decision = decisions[gpu.key]
        n = len(gpu.trials)
        if any(t.alone for t in gpu.trials):
            continue
        if whole_gpu and n:
            continue
        if not whole_gpu and (n >= decision.limit or not decision.open):
            continue
        if not _cpus_free(gpu.key.node, view):
            continue
        candidates.append((n / decision.limit, n, gpu.utilization_pct or 0.0, gpu.key, gpu))
    if not candidates:
        return None
    candidates.sort(key=lambda c: (c[0], c[1], c[2], c[3].node, c[3].index))
    gpu = candidates[0][4]
    decision = decisions[gpu.key]
    co_tenants = tuple(sorted(t.number for t in gpu.trials))
    if whole_gpu:
        return Placement(
            gpu.key, 1.0, (), "alone on a whole GPU: it ran out of memory under a shared cap"
        )
    share = decision.share
    reason = f"{decision.reason} (trial {len(gpu.trials) + 1} of {decision.limit})"
    return Placement(gpu.key, share, co_tenants, reason)


def _cpus_free(node: str, view: PackingView) -> bool:
    total = view.node_cpus.get(node)
    if total is None:
        return True
    used = sum(t.cpus for g in view.gpus if g.key.node == node for t in g.trials)
    return used + view.new_trial_cpus <= total + 1e-9
