"""The ``packing`` section: how many trials share each GPU, declared once, read by the policy.

Pure data (the config composes it, and imports nothing else of placement).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from hpsearch._settings import NonNegativeSeconds, OffAsWritten, Seconds, Settings

PackingMode = Annotated[Literal["auto", "off", "fixed"], OffAsWritten]

TARGET_UTIL_PCT = 100.0
"""The predicted busy share (%) a GPU is filled up to."""
SATURATION_UTIL_PCT = 100.0
"""The measured utilisation (%) at which a packed GPU is re-judged from what it measured."""
MEMORY_HEADROOM = 0.10
"""The share of a GPU's memory left free."""
MOST_TRIALS_PER_GPU = 8
"""The most trials on one GPU."""


class PackingSpec(Settings):
    """How many trials share each GPU (see :mod:`hpsearch.placement` for the rules).

    Attributes:
        mode: ``auto``: measure and decide per GPU (one trial until the search's
            trials are measured, then as many as the sharing model predicts the
            most throughput for, while memory fits); ``off``: one trial per GPU;
            ``fixed``: ``trials_per_gpu``.
        trials_per_gpu: the count of ``fixed``; 0 runs trials on CPU only.
        target_util: the predicted busy share (%) a GPU is filled up to.
        saturation_util: the measured utilisation (%) from which a count larger
            than what fits falls; not below ``target_util`` (the hysteresis).
        max_trials_per_gpu: the most trials on one GPU.
        memory_headroom: the share of a GPU's memory left free.
        probe_seconds: how long a GPU is measured, past its trials' warm-up,
            before its count rises.
        cooldown_seconds: after the count falls, how long before it may rise.
        mps: ``auto`` starts an NVIDIA MPS daemon for each GPU of this machine the
            first time it holds more than one trial, where ``nvidia-cuda-mps-control``
            is installed and no daemon runs already (and quits it after); its clients'
            steps against time-sliced ones beside them say whether it paid. ``off``
            never does.
    """

    mode: PackingMode = "auto"
    trials_per_gpu: NonNegativeInt = 2
    target_util: float = Field(default=TARGET_UTIL_PCT, gt=0, le=100)
    saturation_util: float = Field(default=SATURATION_UTIL_PCT, gt=0, le=100)
    max_trials_per_gpu: PositiveInt = MOST_TRIALS_PER_GPU
    memory_headroom: float = Field(default=MEMORY_HEADROOM, ge=0, lt=0.9)
    probe_seconds: Seconds = 5.0
    cooldown_seconds: NonNegativeSeconds = 30.0
    mps: Annotated[Literal["auto", "off"], OffAsWritten] = "auto"

    @property
    def cpu_only(self) -> bool:
        """Whether trials take no GPU at all (``fixed`` with ``trials_per_gpu: 0``)."""
        return self.mode == "fixed" and self.trials_per_gpu == 0

    @property
    def most_per_gpu(self) -> int:
        """The most trials this packing may put on one GPU."""
        counts = {"off": 1, "fixed": self.trials_per_gpu, "auto": self.max_trials_per_gpu}
        return counts[self.mode]

    @model_validator(mode="after")
    def _band(self) -> PackingSpec:
        if self.trials_per_gpu == 0 and self.mode != "fixed":
            raise ValueError(
                f"trials_per_gpu: 0 (trials on CPU only) needs mode: fixed, not {self.mode}; "
                "write packing: {mode: fixed, trials_per_gpu: 0}"
            )
        if "trials_per_gpu" in self.model_fields_set and "mode" not in self.model_fields_set:
            # packing: {trials_per_gpu: 4} reads as four a GPU to a Ray Tune user ({"gpu":
            # 0.25}); auto, the default, would ignore it. A mode written out is a choice: a
            # count kept beside it is for switching back to fixed.
            n = self.trials_per_gpu
            raise ValueError(
                "trials_per_gpu is the count of mode: fixed, and mode is auto by default; "
                f"write packing: {{mode: fixed, trials_per_gpu: {n}}}, or "
                f"max_trials_per_gpu: {n} to cap auto"
            )
        if self.saturation_util < self.target_util:
            raise ValueError(
                f"saturation_util ({self.saturation_util:g}) must not be below target_util "
                f"({self.target_util:g}): a count falls only above what it was filled to"
            )
        return self


FusionMode = Annotated[Literal["off", "fixed", "auto"], OffAsWritten]


class FusionSpec(Settings):
    """Fused trials: several trials of one shape trained as one model in one worker.

    Attributes:
        mode: ``off``: one trial per worker; ``fixed``: ``members`` trials per
            worker, fused by the training function ``train`` names; ``auto``: per
            shape, groups of 2, then 4, ... while the members' aggregate speed
            (their ``samples_per_sec``) pays for each doubling over one member's
            alone (their ``samples_per_sec_solo``); one member where fusion does not pay.
        members: the trials of each fused group (``fixed``); a group never takes
            more trials than the budget has left.
        max_members: the most trials one group holds.
        train: the training function that takes the members,
            ``package.module:function`` (see :func:`hpsearch.fused`).
        shared: the parameters every member of a group shares (shapes and the data
            pipeline); left out, those the function declares with ``hpsearch.fused``.
    """

    mode: FusionMode = "off"
    members: PositiveInt = 4
    max_members: PositiveInt = 16
    train: str = ""
    shared: list[str] | None = None

    @property
    def fuses(self) -> bool:
        """Whether trials are fused at all (a mode other than ``off``)."""
        return self.mode != "off"

    @model_validator(mode="after")
    def _complete(self) -> FusionSpec:
        if "members" in self.model_fields_set and "mode" not in self.model_fields_set:
            # Fusion is off by default: fusion: {members: 4, train: ...} would run unfused.
            n = self.members
            raise ValueError(
                "members is the count of mode: fixed, and fusion is off by default; write "
                f"fusion: {{mode: fixed, members: {n}}}, or {{mode: auto, max_members: {n}}}"
            )
        if self.mode == "off":
            return self
        if not self.train:
            raise ValueError(
                "fusion needs train: the function that takes the members, e.g. "
                "train: hpsearch.workloads.digits:train_members"
            )
        if self.members > self.max_members:
            raise ValueError(f"members ({self.members}) is over max_members ({self.max_members})")
        return self
