"""Pruning verdicts as a listener: every reported step's verdict, posted for the trial's worker."""

from __future__ import annotations

from hpsearch.lifecycle._base import TrialListener
from hpsearch.lifecycle._events import TrialEnded, TrialReported
from hpsearch.pruning import VerdictBoard


class VerdictPoster(TrialListener):
    """Posts each step's verdict on the board ``ctx.should_prune()`` reads; forgets ended trials."""

    def __init__(self, board: VerdictBoard) -> None:
        self._board = board

    def on_reported(self, event: TrialReported) -> None:
        self._board.post(event.number, event.step, event.verdict.prune)

    def on_ended(self, event: TrialEnded) -> None:
        self._board.forget(event.number)
