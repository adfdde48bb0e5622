"""Pruning decisions travelling from the driver to trial workers.

The driver judges every reported step with the study's pruner (only the driver
talks to Optuna) and posts the verdict here; ``ctx.should_prune()`` in the
worker waits for the verdict of the step it just reported. This keeps Optuna's
semantics, where ``should_prune`` answers for the latest ``report``.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, cast

import ray

NAMESPACE = "hpsearch"


@ray.remote(num_cpus=0)
class DecisionBoard:
    """A Ray actor holding one verdict per (trial number, step)."""

    def __init__(self) -> None:
        self._verdicts: dict[tuple[int, int], bool] = {}
        self._posted: dict[tuple[int, int], asyncio.Event] = {}

    def _event(self, key: tuple[int, int]) -> asyncio.Event:
        if key not in self._posted:
            self._posted[key] = asyncio.Event()
        return self._posted[key]

    async def post(self, number: int, step: int, prune: bool) -> None:
        """Record the verdict for ``step`` of trial ``number``."""
        self._verdicts[(number, step)] = prune
        self._event((number, step)).set()

    async def wait(self, number: int, step: int, timeout_s: float) -> bool | None:
        """The verdict for ``step``, waiting for it up to ``timeout_s``; ``None`` if none came."""
        key = (number, step)
        try:
            await asyncio.wait_for(self._event(key).wait(), timeout_s)
        except TimeoutError:
            return None
        return self._verdicts.get(key)

    async def forget(self, number: int) -> None:
        """Drop everything about a finished trial."""
        for key in [k for k in self._posted if k[0] == number]:
            self._posted.pop(key, None)
            self._verdicts.pop(key, None)


class DecisionBoardHandle:
    """The driver's side: creates the board, posts verdicts, removes it at the end."""

    def __init__(self) -> None:
        self.name = f"hpsearch-decisions-{uuid.uuid4().hex[:12]}"
        self._actor: Any = DecisionBoard.options(  # type: ignore[attr-defined]
            name=self.name, namespace=NAMESPACE
        ).remote()

    def post(self, number: int, step: int, prune: bool) -> None:
        """Post a verdict without waiting (calls from one caller keep their order)."""
        self._actor.post.remote(number, step, prune)

    def forget(self, number: int) -> None:
        """Drop a finished trial's verdicts."""
        self._actor.forget.remote(number)

    def close(self) -> None:
        """Remove the actor."""
        ray.kill(self._actor)


def wait_for_verdict(
    board_name: str, number: int, step: int, timeout_s: float = 120.0
) -> bool | None:
    """Worker side: the verdict for ``step`` of trial ``number`` (``None`` on timeout)."""
    actor = ray.get_actor(board_name, namespace=NAMESPACE)
    return cast("bool | None", ray.get(actor.wait.remote(number, step, timeout_s)))
