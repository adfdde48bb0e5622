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
from hpsearch.lifecycle._events import Ending, Opening, TrialEnded, TrialOpened
from hpsearch.oom import (
    MemoryNeeds,
    OomBook,
    OomReport,
    cgroup_oom_kills,
    host_oom_evidence,
    oom_record,
)
from hpsearch.study import StudyHandle
from hpsearch.trial.protocol import Outcome


class OomHandling(TrialListener):
    """Turns out-of-memory ends into verdicts the sampler learns from.

    Args:
        book: judges, predicts and records.
        handle: the study (re-runs alone are queued in it).
        earlier: the study's trials so far (their peaks and OOMs say what configurations need).
    """

    def __init__(
        self, book: OomBook, handle: StudyHandle, earlier: Sequence[FrozenTrial] = ()
    ) -> None:
        self._book = book
        self._handle = handle
        self._oom_kills = cgroup_oom_kills()
        self._alone: dict[int, dict[str, Any]] = {}
        self._sampled: dict[int, dict[str, Any]] = {}
        spec = book.spec
        self._needs = MemoryNeeds(spec.grows_memory, spec.memory_neutral)
        for trial in earlier:
            self._learn_from(trial)

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
            return
        cap = self._book.cap_mb(event.admission.gpus)
        need = self._needs.beyond(event.params, cap) if cap is not None else None
        if cap is not None and need is not None:
            event.wait_for_whole_gpu(
                f"needs at least {need[0]:.0f} MiB (as trial {need[1]}, which it is at least "
                f"as large as), more than its share's {cap:.0f} MiB"
            )

    def on_opened(self, event: TrialOpened) -> None:
        self._sampled[event.number] = event.params

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
            if oom.cap_mb is not None:
                self._needs.ran_out(event.number, event.params, oom.cap_mb)
        if event.oom is not None:
            self._book.record(event.trial, event.oom)

    def on_ended(self, event: TrialEnded) -> None:
        sampled = self._sampled.pop(event.number, None)
        if sampled is not None and event.peak_memory_mb is not None and event.oom is None:
            self._needs.ran(event.number, sampled, event.peak_memory_mb)
        params = self._alone.pop(event.number, None)
        if params is not None:
            self._handle.study.enqueue_trial(
                params, user_attrs={attrs.ALONE_RETRY_OF: event.number}
            )

    def _learn_from(self, trial: FrozenTrial) -> None:
        """What an earlier trial says its configuration needs: its peak, or a cap too small."""
        record = oom_record(trial)
        if record is not None:
            if record.report is not None and record.report.cap_mb is not None:
                self._needs.ran_out(trial.number, trial.params, record.report.cap_mb)
            return
        if trial.state != TrialState.COMPLETE:
            return
        summary = trial.user_attrs.get(attrs.GPU, {}).get("summary", {})
        peaks = [v for k, v in summary.items() if k.endswith("process_memory_peak_mb")]
        if peaks:
            self._needs.ran(trial.number, trial.params, max(peaks))

    def _host_oom(self, crash: str, step: int | None) -> OomReport | None:
        """The worker died: was it killed for host memory? (Ray's text, or the cgroup's count.)"""
        kills = cgroup_oom_kills()
        evidence = host_oom_evidence(crash, self._oom_kills, kills)
        self._oom_kills = kills
        if not evidence:
            return None
        return OomReport(kind="host", message=evidence, step=step)
