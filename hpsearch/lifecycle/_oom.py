"""Out-of-memory handling as a listener: predict before launch, judge at the end, retry alone.

* Opening: a suggestion that needs at least the memory of one that ran out is
  held back (``predicted_oom``).
* Ending: an out-of-memory end is judged (infeasible, or once more alone on a
  whole GPU) and recorded on the trial; a worker that died while the kernel's
  OOM killer acted is pruned for host memory rather than failed.
* Ended: a trial to re-run alone is queued.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from hpsearch import attrs
from hpsearch.lifecycle._base import TrialListener
from hpsearch.lifecycle._events import Ending, Opening, TrialEnded
from hpsearch.oom import OomBook, OomReport, cgroup_oom_kills, host_oom_evidence
from hpsearch.study import StudyHandle
from hpsearch.trial.protocol import Outcome


class OomHandling(TrialListener):
    """Turns out-of-memory ends into verdicts the sampler learns from.

    Args:
        book: judges, predicts and records.
        handle: the study (re-runs alone are queued in it).
    """

    def __init__(self, book: OomBook, handle: StudyHandle) -> None:
        self._book = book
        self._handle = handle
        self._oom_kills = cgroup_oom_kills()
        self._alone: dict[int, dict[str, Any]] = {}

    def next_runs_alone(self, trials: Sequence[FrozenTrial]) -> bool:
        """Whether the next trial Optuna hands out re-runs, alone on a whole GPU, an OOM."""
        waiting = [t for t in trials if t.state == TrialState.WAITING]
        return (
            bool(waiting)
            and attrs.ALONE_RETRY_OF in min(waiting, key=lambda t: t.number).user_attrs
        )

    def on_opening(self, event: Opening) -> None:
        verdict = self._book.predicted(event.params, event.admission.gpus)
        if verdict is not None:
            event.skip(verdict.reason, verdict.record)

    def on_ending(self, event: Ending) -> None:
        report = event.report
        if report is not None and report.retries:
            # What ran is not what was sampled: keep the smaller batches on the trial.
            event.trial.set_user_attr(attrs.OOM_RETRIES, [r.to_dict() for r in report.retries])
        oom = report.oom if report is not None else None
        if oom is None and event.crash is not None:
            oom = self._host_oom(event.crash, event.last_step)
            if oom is not None:
                event.outcome, event.error = Outcome.PRUNED, ""
        if oom is not None:
            verdict = self._book.judge(
                number=event.number,
                params=event.params,
                oom=oom,
                gpus=event.admission.gpus,
                co_tenants=event.co_tenants,
                alone_retry_of=event.alone_retry_of,
                retries=report.retries if report is not None else (),
            )
            event.oom, event.prune_reason, event.pruned_at = (
                verdict.record,
                verdict.reason,
                oom.step,
            )
            if verdict.run_alone:
                self._alone[event.number] = dict(event.params)
        if event.oom is not None:
            self._book.record(event.trial, event.oom)

    def on_ended(self, event: TrialEnded) -> None:
        params = self._alone.pop(event.number, None)
        if params is not None:
            self._handle.study.enqueue_trial(
                params, user_attrs={attrs.ALONE_RETRY_OF: event.number}
            )

    def _host_oom(self, crash: str, step: int | None) -> OomReport | None:
        """The worker died: was it killed for host memory? (Ray's text, or the cgroup's count.)"""
        kills = cgroup_oom_kills()
        evidence = host_oom_evidence(crash, self._oom_kills, kills)
        self._oom_kills = kills
        if not evidence:
            return None
        return OomReport(kind="host", message=evidence, step=step)
