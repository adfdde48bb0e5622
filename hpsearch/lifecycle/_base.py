"""A listener of the trial lifecycle: one method per event, each doing nothing unless overridden."""

from __future__ import annotations

from hpsearch.lifecycle._events import (
    Ending,
    GpuLoadDeclared,
    KnobsReported,
    Measured,
    Opening,
    TrialEnded,
    TrialOpened,
    TrialOutOfMemory,
    TrialPlaced,
    TrialPruned,
    TrialReported,
    TrialsReclaimed,
    TrialStarted,
)


class TrialListener:
    """Follows trials through the :class:`~hpsearch.lifecycle.TrialLedger`.

    Subclasses override the events they care about. Listeners are told in the
    order the composition root subscribed them; only :meth:`on_opening`,
    :meth:`on_measured` and :meth:`on_ending` may amend what they are given.
    """

    def on_opening(self, event: Opening) -> None:
        """A suggestion is about to be launched; :meth:`Opening.skip` holds it back."""

    def on_opened(self, event: TrialOpened) -> None:
        """A trial will be launched."""

    def on_started(self, event: TrialStarted) -> None:
        """A trial's worker started."""

    def on_placed(self, event: TrialPlaced) -> None:
        """A trial's worker said where it runs."""

    def on_measured(self, event: Measured) -> None:
        """A trial reported metrics, not yet recorded: :meth:`Measured.derive` adds to them."""

    def on_reported(self, event: TrialReported) -> None:
        """A trial reported a step."""

    def on_pruned(self, event: TrialPruned) -> None:
        """The pruner said to stop a trial."""

    def on_gpu_load(self, event: GpuLoadDeclared) -> None:
        """A trial declared its simulated GPU load."""

    def on_knobs(self, event: KnobsReported) -> None:
        """A trial reported the throughput knobs in effect."""

    def on_ending(self, event: Ending) -> None:
        """A trial is about to be told to Optuna: amend its ending, write last attrs."""

    def on_out_of_memory(self, event: TrialOutOfMemory) -> None:
        """A trial ran out of memory."""

    def on_ended(self, event: TrialEnded) -> None:
        """A trial is over and recorded in Optuna."""

    def on_reclaimed(self, event: TrialsReclaimed) -> None:
        """Trials of a driver that is gone were failed and queued again."""

    def on_tick(self, now: float) -> None:
        """Periodic upkeep (about once a second while the search runs)."""
