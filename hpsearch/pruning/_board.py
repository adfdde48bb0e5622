"""Pruning verdicts travelling from the driver to trial workers.

The driver judges every reported step with the study's pruner (only the driver
talks to Optuna) and posts the verdict on a board; ``ctx.should_prune()`` in the
worker waits for the verdict of the step it just reported. This keeps Optuna's
semantics, where ``should_prune`` answers for the latest ``report``.

Two boards: :class:`RayVerdictBoard`, a named Ray actor workers on any node
find by name, and :class:`LocalVerdictBoard`, held in the driver for a runner
whose trials run in the driver's process (the simulated-time runner).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any, cast

NAMESPACE = "hpsearch"
VERDICT_TIMEOUT_S = 120.0
"""How long a worker waits for the verdict of a step before going on as if told to keep it."""

logger = logging.getLogger(__name__)


class VerdictBook:
    """One verdict per (trial number, step), waited for by the workers.

    The Ray actor's body; plain asyncio, so its waiting and timeouts are tested without Ray.
    """

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


class RayVerdictBoard:
    """The driver's side of a board held by a named Ray actor (Ray must be connected)."""

    def __init__(self) -> None:
        import ray

        self.name = f"hpsearch-decisions-{uuid.uuid4().hex[:12]}"
        actor_class: Any = ray.remote(num_cpus=0)(VerdictBook)
        self._actor: Any = actor_class.options(name=self.name, namespace=NAMESPACE).remote()

    def post(self, number: int, step: int, prune: bool) -> None:
        """Post a verdict without waiting (calls from one caller keep their order)."""
        self._actor.post.remote(number, step, prune)

    def forget(self, number: int) -> None:
        """Drop a finished trial's verdicts."""
        self._actor.forget.remote(number)

    def close(self) -> None:
        """Remove the actor."""
        import ray

        ray.kill(self._actor)


class LocalVerdictBoard:
    """A board in the driver's memory, read directly by a runner in the same process."""

    name = ""

    def __init__(self) -> None:
        self._verdicts: dict[tuple[int, int], bool] = {}

    def post(self, number: int, step: int, prune: bool) -> None:
        """Record the verdict for one step."""
        self._verdicts[(number, step)] = prune

    def verdict(self, number: int, step: int) -> bool | None:
        """The verdict for ``step`` of trial ``number``, if posted."""
        return self._verdicts.get((number, step))

    def forget(self, number: int) -> None:
        """Drop a finished trial's verdicts."""
        for key in [k for k in self._verdicts if k[0] == number]:
            del self._verdicts[key]

    def close(self) -> None:
        """Nothing to remove."""
        self._verdicts.clear()


def verdict_oracle(number: int, lookup: Callable[[int, int], bool | None]) -> Callable[[int], bool]:
    """``ctx.should_prune()`` for trial ``number``: the verdict ``lookup`` finds for a step.

    A verdict that never comes (the driver is slow or gone) keeps the trial
    running, with a warning: losing a trial to a missing answer would be worse.
    """

    def should_prune(step: int) -> bool:
        verdict = lookup(number, step)
        if verdict is None:
            logger.warning("trial %d: no pruning verdict for step %d; going on", number, step)
        return bool(verdict)

    return should_prune


def ray_board_lookup(
    board_name: str, timeout_s: float = VERDICT_TIMEOUT_S
) -> Callable[[int, int], bool | None]:
    """Worker side: waits on the named Ray board for a step's verdict (``None`` on timeout)."""
    import ray

    actor = ray.get_actor(board_name, namespace=NAMESPACE)

    def lookup(number: int, step: int) -> bool | None:
        return cast("bool | None", ray.get(actor.wait.remote(number, step, timeout_s)))

    return lookup
