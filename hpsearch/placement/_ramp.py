"""Packing's judge: a GPU's throughput at each count of trials, measured from their steps.

Utilisation says whether trials leave a GPU idle; it does not say whether more
of them finish sooner (a trial bound by its CPU, its data or the driver gains
nothing from a neighbour however idle the GPU is). So every count a GPU holds
is judged by the work its trials complete (Gandiva, OSDI'18, judges packing
the same way): each step a trial reports took some seconds, with some number
of warm trials (trials that had reported once) on its GPU; a count's
throughput is that count over the mean step time at it. Trials still starting
(a new worker's imports and CUDA context) do no steps and do not count, so a
count is measured as soon as its trials work, however long they took to start,
and once more trials than it holds have stepped at it: the trials a count began
with are one draw of the search's, and where trials differ in load (a sampled
model size) their steps together say how that mix shares the GPU, not how the
count does (on simulated V100s whose trials were 5, 15 or 40% busy, six measured
0.69-0.92x five in auto, and 1.07x five over whole runs of each).

A count is kept while it gains what packing asks of every trial added
(:data:`~hpsearch.placement.MIN_GAIN` each, compounded) over the best count
measured below it, and goes back to that count once measured short of it
beyond doubt: the trials of a search differ in size, so their steps do too,
and a gain counts as missed only when it misses by more than twice its
standard error. Pure: it is told the steps and the count.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

from hpsearch.placement._capacity import MIN_GAIN
from hpsearch.placement._views import Judgement, MpsVerdict, Verdict

STEPS_KEPT = 64
"""The recent step times kept per count (the search drifts as it learns)."""
DOUBT = 2.0
"""How many standard errors a gain must miss by before a count is gone back from."""


def steps_needed(count: int) -> int:
    """Step times a count needs before it is judged: two a trial, eight at least."""
    return max(8, 2 * count)


class StepRates:
    """One GPU's step times by how many warm trials it held: its throughput at each count."""

    def __init__(self) -> None:
        self._steps: dict[int, deque[float]] = {}
        self._seen: dict[int, set[int]] = {}
        """Per count, the trials that stepped at it, until more than it holds did (a
        turnover: then it is measurable, and the set is no longer kept)."""
        self._said: tuple[int, int | None, Verdict, bool] | None = None
        self._by_client: dict[tuple[int, bool], deque[float]] = {}
        self._mps_said: tuple[int, bool] | None = None

    def add(self, warm: int, seconds: float, mps: bool = False, trial: int | None = None) -> None:
        """A step of ``seconds`` taken while ``warm`` trials on the GPU worked (``mps``: by an
        MPS client), by ``trial``."""
        if warm < 1 or seconds <= 0:
            return
        self._steps.setdefault(warm, deque(maxlen=STEPS_KEPT)).append(seconds)
        seen = self._seen.setdefault(warm, set())
        if trial is not None and len(seen) <= warm:
            seen.add(trial)
        self._by_client.setdefault((warm, mps), deque(maxlen=STEPS_KEPT)).append(seconds)

    def mps_verdict(self) -> MpsVerdict | None:
        """Whether MPS clients step faster than time-sliced workers at the same count.

        Both kinds run side by side where the daemon started after a worker's CUDA
        did: the highest count at which each took :data:`STEPS_NEEDED` steps decides.
        Returns a verdict when it differs from the last one given, else ``None``.
        """
        both = [
            c
            for (c, mps), steps in self._by_client.items()
            if mps
            and len(steps) >= steps_needed(1)
            and len(self._by_client.get((c, False), ())) >= steps_needed(1)
        ]
        if not both:
            return None
        count = max(both)
        mps_rate = 1 / statistics.fmean(self._by_client[(count, True)])
        sliced = 1 / statistics.fmean(self._by_client[(count, False)])
        ratio = mps_rate / sliced
        paid = ratio >= 1 + MIN_GAIN
        said = (count, paid)
        if said == self._mps_said:
            return None
        self._mps_said = said
        return MpsVerdict(
            count,
            mps_rate,
            sliced,
            paid,
            f"MPS {'paid' if paid else 'did not pay'}: with {count} trial(s) on the GPU an MPS "
            f"client stepped {mps_rate:.2f}/s, a time-sliced one {sliced:.2f}/s "
            f"({ratio:.2f}x, needs {1 + MIN_GAIN:.2f}x)",
        )

    def throughput(self, count: int) -> float | None:
        """Steps per second at ``count`` trials (``None``: too few steps measured there)."""
        steps = self._steps.get(count)
        if steps is None or len(steps) < steps_needed(count):
            return None
        seen = self._seen.get(count)
        if seen and len(seen) <= count:
            return None  # the trials it began with only: one mix of them, not the search's
        return count * len(steps) / sum(steps)

    def _spread(self, count: int) -> float:
        """The relative standard error of ``count``'s throughput (its mean step's)."""
        steps = self._steps[count]
        return statistics.stdev(steps) / math.sqrt(len(steps)) / statistics.fmean(steps)

    def measured(self) -> list[int]:
        """The counts measured well enough to judge, smallest first."""
        return sorted(c for c in self._steps if self.throughput(c) is not None)

    def forget(self, count: int) -> None:
        """Measure ``count`` afresh next time it is held (it was gone back from)."""
        self._steps.pop(count, None)
        self._seen.pop(count, None)

    def pays(self, count: int) -> bool:
        """Whether ``count`` was measured to gain what packing asks over the best count
        measured below it (one measured alone pays nothing yet)."""
        against = self._against_best_below(count) if count in self.measured() else None
        return against is not None and against[2] >= against[3]

    def _against_best_below(self, top: int) -> tuple[int, float, float, float] | None:
        """The best count measured below ``top`` (a measured count), its throughput, ``top``'s
        gain over it and the gain needed; ``None``: none measured below."""
        below = [c for c in self.measured() if c < top]
        if not below:
            return None
        best = max(below, key=lambda c: self.throughput(c) or 0.0)
        best_rate, rate = self.throughput(best), self.throughput(top)
        assert best_rate is not None
        assert rate is not None
        return best, best_rate, rate / best_rate, (1 + MIN_GAIN) ** (top - best)

    def judge(self, limit: int) -> Judgement | None:
        """The highest count measured up to ``limit`` against the best below it.

        Returns:
            A judgement when it differs from the last one given (a verdict is said
            once, not at every decision), else ``None``.
        """
        counts = [c for c in self.measured() if c <= limit]
        if not counts:
            return None
        top = counts[-1]
        rate = self.throughput(top)
        assert rate is not None
        against = self._against_best_below(top)
        if against is None:
            judgement = Judgement(
                Verdict.KEEP, top, top, rate, None, None, True,
                f"{top} trial(s) measured {rate:.2f} steps/s",
            )  # fmt: skip
        else:
            best, best_rate, gain, needed = against
            doubt = DOUBT * math.hypot(self._spread(top), self._spread(best))
            paid = gain >= needed
            missed = gain * (1 + doubt) < needed
            judgement = Judgement(
                Verdict.BACK if missed else Verdict.KEEP,
                top,
                best if missed else top,
                rate,
                best,
                gain,
                paid,
                f"{top} trial(s) measured {rate:.2f} steps/s, {gain:.2f}x {best}'s "
                f"{best_rate:.2f} (needs {needed:.2f}x"
                + (f", ±{doubt:.0%})" if not paid else ")")
                + (f": back to {best}" if missed else ""),
            )
        said = (judgement.level, judgement.below, judgement.verdict, judgement.paid)
        if said == self._said:
            return None
        self._said = said
        return judgement
