"""An NNI experiment config (``config.yml``, NNI 2 and 3) as a hpsearch config.

======================================================  =====================================
NNI                                                     hpsearch
======================================================  =====================================
``experimentName`` (else the folder's name)             ``study.name``
``searchSpaceFile`` / ``searchSpace``                   ``space`` (as ``hpsearch convert``
                                                        converts a ``search_space.json``)
``trialCommand``                                        ``train: {command: ...}``: the trial
                                                        script as it is (its ``import nni``
                                                        is answered by hpsearch)
``trialConcurrency``                                    ``execution.max_concurrent``
``maxTrialNumber``                                      ``study.n_trials``
``maxExperimentDuration``                               ``study.timeout``
``maxTrialDuration``                                    ``execution.trial_timeout``
``trialGpuNumber: 0``                                   ``execution.num_gpus: 0``
``tuner: {name, classArgs: {optimize_mode, seed}}``     ``study.sampler`` and the objective's
                                                        direction (metric ``default``)
``tuner``/``advisor`` ``Hyperband``, ``BOHB``           random or TPE, and Optuna's
                                                        Hyperband pruner (``R``, ``eta``)
``assessor: Medianstop`` (``start_step``)               ``study.pruner: median``
                                                        (``n_warmup_steps``)
======================================================  =====================================

A tuner with no Optuna sampler of its kind (Anneal, Evolution, SMAC, ...) is searched
with TPE, and a note says so; what NNI's own machinery reads (its training service, log
level, manager address) is left out, in a note. What would search something else or
run something else (PBT, the Curvefitting assessor, annotation mode, a trial needing
several GPUs, an NNI 1 config) is a one-line error naming its key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hpsearch.convert._base import Converted, Source
from hpsearch.convert._nni import NNI_OBJECTIVE, TRIAL_CODE_NOTE, nested_env, space_of

_TOP_KEYS = {
    "experimentName", "searchSpaceFile", "searchSpace", "trialCommand",
    "trialCodeDirectory", "trialConcurrency", "trialGpuNumber", "maxExperimentDuration",
    "maxTrialNumber", "maxTrialDuration", "tuner", "assessor", "advisor",
    "trainingService", "useAnnotation", "experimentWorkingDirectory", "logLevel",
    "debug", "nniManagerIp", "tunerGpuIndices", "experimentType",
}  # fmt: skip
_NNI_OWN = {
    "experimentWorkingDirectory", "logLevel", "debug", "nniManagerIp", "tunerGpuIndices",
    "experimentType",
}  # fmt: skip
_NNI_1 = ("authorName", "maxTrialNum", "searchSpacePath", "trial", "maxExecDuration")
_SAMPLERS = {"TPE": "tpe", "Random": "random", "GridSearch": "grid", "GP": "gp"}
_LIKE_TPE = {"Anneal", "Evolution", "SMAC", "DNGO", "Metis", "BatchTuner", "Hyperopt"}
_HYPERBAND = {"Hyperband": "random", "BOHB": "tpe"}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def from_nni_experiment(path: Path) -> Converted:
    """The hpsearch config of the NNI experiment config in ``path``.

    Raises:
        ConfigError: a key with no hpsearch equivalent, naming it and its line.
    """
    source, experiment = Source.of_yaml(path)
    if not isinstance(experiment, dict):
        raise source.error((), "not an NNI experiment config (a mapping of its settings)")
    old = [key for key in _NNI_1 if key in experiment]
    if old:
        raise source.error(
            (old[0],), "is NNI 1's config format", "write it as NNI 2's (nnictl's v2 config)"
        )
    source.refuse_unknown(experiment, _TOP_KEYS)
    if experiment.get("useAnnotation"):
        raise source.error(
            ("useAnnotation",), "NNI's annotations have no hpsearch form", "use searchSpaceFile"
        )
    notes = [TRIAL_CODE_NOTE]
    space = _space(source, experiment, notes)
    study, direction = _study(source, experiment, notes)
    config: dict[str, Any] = {
        "study": study,
        "objective": {**NNI_OBJECTIVE, "direction": direction},
    }
    if "trialCommand" in experiment:
        config["train"] = {"command": str(experiment["trialCommand"])}
        _code_directory(source, experiment, notes)
    config["space"] = space
    execution = _execution(source, experiment)
    if execution:
        config["execution"] = execution
    _left_out(experiment, notes)
    return Converted(config, "an NNI experiment config", notes, nested_env(space))


def _space(source: Source, experiment: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The space, written in the config or in the file it names (whose entries an error
    then names)."""
    if "searchSpace" in experiment:
        return space_of(source, experiment["searchSpace"], ("searchSpace",), notes)[0]
    if "searchSpaceFile" not in experiment:
        raise source.error((), "names no search space", "add searchSpaceFile or searchSpace")
    file = source.path.parent / str(experiment["searchSpaceFile"])
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise source.error(
            ("searchSpaceFile",), f"cannot read {file} as JSON ({exc})", "check the path"
        ) from None
    return space_of(Source(file, lambda key: None), document, (), notes)[0]


def _study(
    source: Source, experiment: dict[str, Any], notes: list[str]
) -> tuple[dict[str, Any], str]:
    """``study`` (name, sampler, budget, pruner) and the direction the tuner optimises."""
    folder = source.path.resolve().parent.name
    study: dict[str, Any] = {"name": str(experiment.get("experimentName") or folder or "nni")}
    tuner = experiment.get("tuner") or experiment.get("advisor")
    key = "tuner" if "tuner" in experiment else "advisor"
    direction = "maximize"
    if tuner is not None:
        study["sampler"], direction, pruner = _tuner(source, key, tuner, notes)
        if pruner is not None:
            study["pruner"] = pruner
    if "maxTrialNumber" in experiment:
        study["n_trials"] = experiment["maxTrialNumber"]
    if "maxExperimentDuration" in experiment:
        study["timeout"] = _seconds(source, "maxExperimentDuration", experiment)
    if "assessor" in experiment:
        if "pruner" in study:
            raise source.error(("assessor",), f"with the {key}'s Hyperband", "remove one")
        study["pruner"] = _assessor(source, experiment["assessor"], direction)
    return study, direction


def _tuner(
    source: Source, key: str, tuner: Any, notes: list[str]
) -> tuple[dict[str, Any], str, dict[str, Any] | None]:
    if not isinstance(tuner, dict) or "name" not in tuner:
        raise source.error((key,), "must name a built-in tuner", f"{key}: {{name: TPE}}")
    name, args = str(tuner["name"]), tuner.get("classArgs") or {}
    if not isinstance(args, dict):
        raise source.error((key, "classArgs"), "must be a mapping")
    direction = str(args.get("optimize_mode", "maximize"))
    if direction not in ("maximize", "minimize"):
        raise source.error((key, "classArgs", "optimize_mode"), "is maximize or minimize")
    pruner = None
    if name in _SAMPLERS:
        sampler: dict[str, Any] = {"type": _SAMPLERS[name]}
    elif name in _LIKE_TPE:
        sampler = {"type": "tpe"}
        notes.append(f"{key} {name}: no Optuna sampler of its kind; searched with TPE.")
    elif name in _HYPERBAND:
        sampler = {"type": _HYPERBAND[name]}
        options: dict[str, Any] = {"reduction_factor": args.get("eta", 3)}
        if "R" in args:
            options["max_resource"] = args["R"]
        pruner = {"type": "hyperband", "options": options}
        notes.append(
            f"{key} {name}: {sampler['type']} sampling and Optuna's Hyperband pruner "
            "(R: max_resource, eta: reduction_factor), its budget in the steps reported."
        )
    elif name == "PBT":
        raise source.error(
            (key, "name"), "PBT changes a running trial's parameters: no hpsearch form"
        )
    else:
        raise source.error((key, "name"), f"'{name}' is not an NNI built-in tuner")
    if "seed" in args:
        sampler["seed"] = args["seed"]
    other = sorted(set(args) - {"optimize_mode", "seed", "R", "eta"})
    if other:
        notes.append(f"{key}.classArgs {', '.join(other)}: no Optuna equivalent; left out.")
    return sampler, direction, pruner


def _assessor(source: Source, assessor: Any, direction: str) -> dict[str, Any]:
    if not isinstance(assessor, dict) or assessor.get("name") != "Medianstop":
        raise source.error(
            ("assessor", "name"),
            "only Medianstop has an Optuna equivalent (its median pruner)",
            "use Medianstop, or remove the assessor",
        )
    args = assessor.get("classArgs") or {}
    mode = args.get("optimize_mode", direction)
    if mode != direction:
        raise source.error(
            ("assessor", "classArgs", "optimize_mode"), f"must be the tuner's ({direction})"
        )
    return {"type": "median", "options": {"n_warmup_steps": int(args.get("start_step", 0))}}


def _code_directory(source: Source, experiment: dict[str, Any], notes: list[str]) -> None:
    """NNI runs the trial command in ``trialCodeDirectory`` (the config's folder by
    default); hpsearch runs it in the folder ``hpsearch run`` runs in: say which."""
    folder = (source.path.parent / str(experiment.get("trialCodeDirectory", "."))).resolve()
    if folder != Path.cwd().resolve():
        notes.append(f"Run hpsearch in {folder}: NNI runs the trial command there.")


def _execution(source: Source, experiment: dict[str, Any]) -> dict[str, Any]:
    execution: dict[str, Any] = {}
    if "trialConcurrency" in experiment:
        execution["max_concurrent"] = experiment["trialConcurrency"]
    gpus = experiment.get("trialGpuNumber")
    if gpus == 0:
        execution["num_gpus"] = 0  # NNI's trials see no GPU
    elif gpus is not None and gpus != 1:
        raise source.error(
            ("trialGpuNumber",),
            "a trial on several GPUs has no hpsearch form (each trial gets one, or a share)",
            "use 1",
        )
    if "maxTrialDuration" in experiment:
        execution["trial_timeout"] = _seconds(source, "maxTrialDuration", experiment)
    return execution


def _seconds(source: Source, key: str, experiment: dict[str, Any]) -> float:
    """NNI's duration (``90``, ``30m``, ``1.5h``, ``2d``) in seconds."""
    found = _DURATION.match(str(experiment[key]))
    if found is None:
        raise source.error((key,), "is a number and a unit (s, m, h or d)", "e.g. 1h")
    return float(found[1]) * _UNIT_S[found[2]]


def _left_out(experiment: dict[str, Any], notes: list[str]) -> None:
    """What NNI's own machinery reads, said as left out."""
    left = sorted(key for key in experiment if key in _NNI_OWN)
    service = experiment.get("trainingService")
    if isinstance(service, dict):
        platform = service.get("platform", "local")
        if platform != "local":
            notes.append(
                f"trainingService {platform}: trials run on this machine, or on a Ray "
                "cluster (execution.address)."
            )
        if "maxTrialNumberPerGpu" in service:
            notes.append(
                "trainingService.maxTrialNumberPerGpu: packing decides how many trials share "
                "a GPU (packing.mode: fixed with trials_per_gpu to fix it)."
            )
        left += [f"trainingService.{k}" for k in sorted(service) if k not in (
            "platform", "maxTrialNumberPerGpu")]  # fmt: skip
    if left:
        notes.append(f"{', '.join(left)}: NNI's own settings; left out.")
