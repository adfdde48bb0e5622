"""The ``oom`` section: what a trial that runs out of GPU memory does to the search."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from hpsearch._settings import Settings

OomAction = Literal["prune", "retry_smaller_batch"]


class OomSpec(Settings):
    """What a trial that runs out of GPU memory does to the search.

    Attributes:
        action: ``prune``: the trial ends PRUNED (reason ``oom``) and its
            configuration is infeasible for the sampler; ``retry_smaller_batch``:
            first retry it with the micro-batch halved and gradient accumulation
            doubled (the effective batch stays the same), up to ``max_halvings`` times.
        max_halvings: how many times ``retry_smaller_batch`` halves the batch.
        min_batch_size: the smallest micro-batch ``retry_smaller_batch`` goes down to
            (a batch of a few samples trains another model: batch norm, noise).
        grows_memory: parameters whose larger values need more memory; a
            suggestion equal to a configuration that ran out except for greater
            or equal values of these is not launched (pruned as ``predicted_oom``).
        memory_neutral: parameters that do not change the memory a trial needs
            (e.g. ``lr``, ``weight_decay``); the prediction ignores them, so a
            suggestion that differs from one that ran out only in these is not launched.
        retry_alone: a trial that ran out under a shared GPU's memory cap runs
            once more alone on a whole GPU before its configuration is judged
            infeasible (packing must not cost the search a good configuration).
    """

    action: OomAction = "prune"
    max_halvings: PositiveInt = 2
    min_batch_size: PositiveInt = 1
    grows_memory: list[str] = Field(default_factory=lambda: ["batch_size"])
    memory_neutral: list[str] = Field(default_factory=list)
    retry_alone: bool = True
