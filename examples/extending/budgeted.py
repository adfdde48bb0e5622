"""A runner: where the trials execute. Here, one that wraps another and refuses configs.

A runner's ``check`` refuses a config before anything starts (one line, exit 2),
and ``connect`` opens a session that runs the trials. Writing a session from
scratch means running trials somewhere new (a job queue, another cluster manager):
see :class:`hpsearch.runner.RunnerSession`. Wrapping one is the common case: this
runner keeps searches on the simulated-time runner below a trial budget.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from hpsearch.config import ExecutionSpec, RunConfig
from hpsearch.errors import ConfigError
from hpsearch.runner import RunnerSession, SimulatedRunner, TrialRunner
from hpsearch.simulation import SimulatedSpec


class Budgeted(TrialRunner):
    """The simulated-time runner, for searches of at most ``most`` trials."""

    def __init__(self, most: int, inner: TrialRunner | None = None) -> None:
        self.most = most
        self.inner = inner or SimulatedRunner()

    def check(self, config: RunConfig) -> None:
        n_trials = config.study.n_trials
        if n_trials is None or n_trials > self.most:
            raise ConfigError(
                config.source,
                "study.n_trials",
                f"this runner runs at most {self.most} trials, the study asks {n_trials}",
                f"set study.n_trials to {self.most} or less",
            )
        self.inner.check(config)

    def connect(
        self, execution: ExecutionSpec, workdir: str, simulated: SimulatedSpec | None = None
    ) -> AbstractContextManager[RunnerSession]:
        return self.inner.connect(execution, workdir, simulated)
