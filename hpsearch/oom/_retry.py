"""A trial that ran out of memory runs again with a smaller batch: the one rule for it.

The trial's worker and the simulated-time runner both ask :func:`retry_smaller`
what the next attempt is, so the fast test oracle cannot drift from production.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hpsearch.oom._base import BatchRetry
from hpsearch.oom.settings import OomSpec


def halved(params: Mapping[str, Any]) -> dict[str, Any] | None:
    """``params`` with the micro-batch halved and accumulation doubled; ``None`` if it cannot be."""
    batch = params.get("batch_size")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 2 or batch % 2:
        return None
    smaller = {**params, "batch_size": batch // 2}
    if "effective_batch_size" not in params:  # the toolkit derives accumulation from it
        smaller["grad_accum_steps"] = int(params.get("grad_accum_steps", 1)) * 2
    return smaller


def retry_smaller(
    params: Mapping[str, Any],
    spec: OomSpec,
    retries: Sequence[BatchRetry],
    step: int | None,
) -> tuple[dict[str, Any], BatchRetry] | None:
    """The next attempt of a trial that ran out of memory with ``params``, and its record.

    The batch halved and gradient accumulation doubled, so the effective batch
    stays the same. ``None``: the trial ends pruned (``oom.action`` is ``prune``,
    ``oom.max_halvings`` retries were made, or its batch cannot be halved to
    ``oom.min_batch_size`` or more).

    Args:
        params: the parameters of the attempt that ran out.
        spec: the config's ``oom`` section.
        retries: the retries made before.
        step: the last step the attempt reported.
    """
    if spec.action != "retry_smaller_batch" or len(retries) >= spec.max_halvings:
        return None
    smaller = halved(params)
    if smaller is None or smaller["batch_size"] < spec.min_batch_size:
        return None
    retry = BatchRetry(
        step=step,
        batch_size=int(params["batch_size"]),
        retry_batch_size=int(smaller["batch_size"]),
        retry_grad_accum_steps=smaller.get("grad_accum_steps"),
    )
    return smaller, retry
