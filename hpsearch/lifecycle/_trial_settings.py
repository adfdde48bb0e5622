"""What every trial of a search runs with, built from the config: the user's code checked once,
before anything starts, the settings the workers receive, and the launches built from them."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from hpsearch._importable import shadowing
from hpsearch.adapters import (
    asked_resources,
    check_fusion,
    check_train,
    pickles_of,
    resolve_train_function,
)
from hpsearch.config import RunConfig
from hpsearch.errors import ConfigError
from hpsearch.lifecycle._launches import FusionPlan, Launches
from hpsearch.placement import FusionSizer, PackingAdmission
from hpsearch.study import StudyHandle, serve_study
from hpsearch.tracking import absolute_tracking_uri
from hpsearch.trial.other_tools import StudyAccess
from hpsearch.trial.protocol import TrialSettings, TrialTracking


@dataclass(frozen=True)
class CheckedCode:
    """The user's code as the config names it, checked: what the launches need of it.

    Attributes:
        fusion_shared: the parameters a fused group's members share (``None``: no fusion).
        notes: what the search says of the code before it starts (a line each).
    """

    fusion_shared: tuple[str, ...] | None = None
    notes: tuple[str, ...] = ()


def check_user_code(config: RunConfig) -> CheckedCode:
    """Check what ``train`` (and ``fusion.train``) name, once: one line here rather than a
    failure in every trial worker.

    Raises:
        ConfigError: naming the key, what is wrong and how to fix it.
    """
    _check_project_names(os.getcwd(), config.source)
    check_train(
        config.train_target,
        config.command,
        config.source,
        objective=config.optuna_objective,
        trainable=config.tune_trainable,
        space=config.search_space.searched(),
    )
    notes = _resources_note(config)
    fusion = config.fusion
    if not fusion.fuses:
        return CheckedCode(notes=notes)
    shared = check_fusion(fusion.train, fusion.shared, config.space, config.source)
    return CheckedCode(shared, notes)


def _check_project_names(folder: str, source: str) -> None:
    """A module of the project's folder that a worker would import in place of Python's or
    a library's (:func:`~hpsearch._importable.shadowing`): one line now, where each
    worker would fail to start, after Ray had retried it for minutes."""
    found = shadowing(folder)
    if not found:
        return
    entry, name, origin = found[0]
    others = ", ".join(e for e, _, _ in found[1:])
    more = f"; {len(found) - 1} more: {others}" if others else ""
    raise ConfigError(
        source,
        "train",
        f"{entry} in {folder} has the name of the module '{name}' ({origin}) that "
        f"each trial's worker imports before its trial, and the worker, which has this "
        f"folder first on its path, would import {entry} instead and fail to start",
        f"rename {entry} (and what imports it){more}",
    )


def _resources_note(config: RunConfig) -> tuple[str, ...]:
    """A Ray Tune trainable's ``tune.with_resources`` request, which hpsearch does not take:
    what each trial gets instead, and the setting that gives it what it asked."""
    if config.tune_trainable is None:
        return ()
    trainable = resolve_train_function(config.tune_trainable, trainable=True)
    asked = asked_resources(trainable)
    cpus = config.execution.cpus_per_trial
    if not asked or (asked.get("CPU", cpus) == cpus and not asked.get("GPU")):
        return ()
    wants = ", ".join(f"{amount:g} {name}" for name, amount in asked.items())
    line = (
        f"{config.source}: train.tune: '{config.tune_trainable}' asks Tune for {wants} "
        f"(tune.with_resources); each trial gets execution.cpus_per_trial CPUs ({cpus:g})"
    )
    if asked.get("GPU"):
        line += " and its GPU share from packing (packing.mode: off for a whole GPU each)"
    if asked.get("CPU", cpus) != cpus:
        line += f"; set execution.cpus_per_trial: {asked['CPU']:g} for its CPUs"
    return (line,)


@dataclass(frozen=True)
class WorkerSide:
    """What the driver's parts give every trial's worker (the config gives the rest).

    Attributes:
        decision_board: the pruning verdicts' board (empty: no pruner).
        pace_file: where simulated GPUs' pace is published (empty: none).
        worker_dir: the folder the driver shares with its machine's workers.
        gpu_memory_mb: the smallest GPU's memory (``None``: unknown).
        study_access: the study served to an Optuna objective's trials (``None``: none).
    """

    decision_board: str = ""
    pace_file: str = ""
    worker_dir: str = ""
    gpu_memory_mb: float | None = None
    study_access: StudyAccess | None = None


def launches_for(
    config: RunConfig,
    code: CheckedCode,
    side: WorkerSide,
    clock: Callable[[], float],
    evidence: PackingAdmission | None = None,
) -> Launches:
    """The launches of a search: every trial's settings, fused where ``fusion`` says.

    Args:
        evidence: the packing admission, where GPUs are packed: what it measures of each
            launch sizes fused groups too (:meth:`FusionSizer.evidence`).
    """
    fusion = config.fusion
    train = config.train_target or config.optuna_objective or config.tune_trainable or ""
    fused_train = fusion.train if fusion.fuses else ""
    settings = TrialSettings(
        train=train,
        command=config.command,
        source=config.source,
        objectives=tuple(o.metric for o in config.objective_list),
        oom=config.oom,
        timeout_s=config.execution.trial_timeout,
        hang_s=config.execution.hang_timeout,
        decision_board=side.decision_board,
        pace_file=side.pace_file,
        worker_dir=side.worker_dir,
        workdir=os.getcwd(),
        gpu_memory_mb=side.gpu_memory_mb,
        fused_train=fused_train,
        study_access=side.study_access,
        tune_trainable=config.tune_settings,
        tracking=TrialTracking(
            uri=absolute_tracking_uri(config.tracking.uri),
            experiment=config.experiment_name,
            study=config.study.name,
        ),
        by_value=pickles_of((train, fused_train)),
    )
    plan = None
    if code.fusion_shared is not None:
        sizer = FusionSizer.from_settings(fusion, clock, packing=config.packing)
        if evidence is not None:
            evidence.on_profile(sizer.evidence)
            evidence.on_memory(sizer.holds)
        plan = FusionPlan(code.fusion_shared, sizer)
    return Launches(
        settings,
        study=config.study.name,
        seed=config.study.sampler.seed,
        checkpoints=config.execution.checkpoint_dir,
        trials=config.execution.trials_dir,
        fusion=plan,
    )


@contextmanager
def study_access(
    config: RunConfig, handle: StudyHandle, driver_address: Callable[[], str]
) -> Iterator[StudyAccess | None]:
    """For an Optuna objective: the study served to the workers while the search runs."""
    if config.optuna_objective is None:
        yield None
        return
    from hpsearch.adapters import pickled_sampler

    with serve_study(handle.study, driver_address()) as address:
        yield StudyAccess(
            address=address, study=handle.name, sampler=pickled_sampler(handle.study.sampler)
        )
