"""Each trial's launch: the settings every trial shares, its own seed and folders, the admission."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpsearch.placement import Admission, FusionSizer
from hpsearch.trial.checkpoints import trial_folder
from hpsearch.trial.death import output_file, stderr_file
from hpsearch.trial.protocol import MemberSpec, TrialLaunch, TrialSettings
from hpsearch.trial.seeds import trial_seed


@dataclass(frozen=True)
class FusionPlan:
    """Fused launches: how many trials each holds, and the parameters they share.

    Attributes:
        shared: the parameters a group's members share.
        sizer: the member count per shape (fixed, or measured: ``fusion.mode: auto``),
            capped where a group ran out of memory.
    """

    shared: tuple[str, ...]
    sizer: FusionSizer

    def shape(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        """What a group's members share, as values: the shape of a group."""
        return tuple(params.get(name) for name in self.shared)

    def members_for(self, params: Mapping[str, Any], admission: Admission) -> int:
        """The members of a group whose first trial has ``params``, in a launch admitted
        so (a share under one GPU: no more than its memory holds; a nearly empty GPU: a
        doubling)."""
        return self.sizer.members_within(self.shape(params), admission.gpus, admission.room_seen_at)


@dataclass(frozen=True)
class Launches:
    """Builds what the ledger hands the runner for each trial it opens.

    Attributes:
        settings: what every trial of the search runs with.
        study: the study's name (a trial's seed and folders derive from it).
        seed: the study's seed (``study.sampler.seed``).
        checkpoints: the root of the checkpoint folders (``execution.checkpoint_dir``).
        trials: the root of the trials' own folders (``execution.trials_dir``).
        fusion: fused launches (``None``: one trial per launch).
    """

    settings: TrialSettings
    study: str
    seed: int | None
    checkpoints: str
    trials: str
    fusion: FusionPlan | None = None

    def seed_of(self, number: int) -> int:
        """The seed of a new trial ``number``."""
        return trial_seed(self.seed, self.study, number)

    def checkpoint_dir(self, number: int) -> str:
        """The checkpoint folder of a new trial ``number`` (its re-runs inherit it)."""
        return trial_folder(self.checkpoints, self.study, number)

    def member(
        self, number: int, params: dict[str, Any], seed: int, checkpoint_dir: str
    ) -> MemberSpec:
        """Trial ``number`` as a launch runs it."""
        return MemberSpec(
            number=number,
            params=params,
            seed=seed,
            checkpoint_dir=checkpoint_dir,
            trial_dir=trial_folder(self.trials, self.study, number),
        )

    def launch(self, members: Sequence[MemberSpec], admission: Admission) -> TrialLaunch:
        """``members`` in one worker, with ``admission``; its output files are the first's."""
        first, folder = members[0].number, self.settings.worker_dir
        return TrialLaunch(
            members=tuple(members),
            settings=self.settings,
            admission=admission,
            stdout_file=output_file(folder, first, "stdout"),
            stderr_file=stderr_file(folder, first),
        )
