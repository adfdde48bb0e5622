"""A W&B sweep configuration (``sweep.yaml``) as a hpsearch config.

===================================================  ==========================================
W&B                                                  hpsearch
===================================================  ==========================================
``name`` (else the file's name)                      ``study.name``
``method: bayes | random | grid``                    ``study.sampler.type: tpe | random | grid``
``metric: {name, goal}``                             ``objective: {metric, direction}``
``run_cap``                                          ``study.n_trials`` (grid: the grid's size)
``early_terminate: {type: hyperband, ...}``          ``study.pruner: hyperband`` (``min_iter``,
                                                     ``max_iter``, ``eta``, ``s``)
``program`` and ``command`` (``${args}`` ...)        ``train: {command: ... {args}}``
``project``                                          ``tracking.experiment``
``parameters``: ``value``, ``values``,               a constant, a list of choices,
``min``/``max`` (``int_uniform``, ``uniform``,       ``{type: int | float, low, high}``,
``q_uniform``, ``log_uniform_values``,               ``step: q``, ``log: true``
``log_uniform``: bounds are exponents of e)
``q_log_uniform_values``, ``q_log_uniform``          ``log: true`` without the step (a note)
a nested group: ``model: {parameters: {depth: ..}}``  ``model.depth``, and ``train.env``'s
                                                     ``HPSEARCH_WANDB_NESTED: model``
===================================================  ==========================================

A nested group's parameters are searched under dotted names; the program's
``wandb.config["model"]["depth"]`` holds them nested, as W&B's does, because the
variable names the group (a dotted name of no group, as W&B's Hydra example has, stays
flat).

Optuna takes no step on a log scale: a quantized log distribution (W&B's own example
searches its batch size so) is searched on its log range without ``q``, whole numbers
where its bounds and ``q`` are, as Ray Tune's ``OptunaSearch`` searches ``qloguniform``,
and a note says so.

W&B's bayes is Bayesian optimisation with a Gaussian process; it becomes TPE,
Optuna's (and hpsearch's) default Bayesian sampler (``gp`` is Optuna's GP one).
Anything else (``probabilities``, normal, beta and inverse-log distributions,
``metric.target``, ``${envvar:NAME}``) is
a one-line error naming its key: hpsearch has no equivalent, so a silent drop
would search something else.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpsearch.convert._base import (
    Converted,
    Source,
    checked_space,
    command_line,
    log_range_unstepped,
)
from hpsearch.trial.script import ARG_FORMS, WANDB_NESTED_VARIABLE, arg_form

_SAMPLERS = {"bayes": "tpe", "random": "random", "grid": "grid"}
_TOP_KEYS = {
    "name", "description", "method", "metric", "parameters", "early_terminate",
    "run_cap", "program", "command", "project", "entity",
}  # fmt: skip
_PARAM_KEYS = {"value", "values", "distribution", "min", "max", "q"}
_DEFAULT_COMMAND = ["${env}", "${interpreter}", "${program}", "${args}"]
_NOT_CONVERTED = {
    "probabilities": "hpsearch's choices are drawn by the sampler, not with set weights",
    "mu": "normal distributions have no Optuna equivalent",
    "sigma": "normal distributions have no Optuna equivalent",
    "a": "beta distributions have no Optuna equivalent",
    "b": "beta distributions have no Optuna equivalent",
}
_NO_DISTRIBUTION = {
    "inv_log_uniform", "inv_log_uniform_values",
    "normal", "q_normal", "log_normal", "q_log_normal", "beta", "q_beta",
}  # fmt: skip


def from_wandb(path: Path) -> Converted:
    """The hpsearch config of the W&B sweep in ``path``.

    Raises:
        ConfigError: a key with no hpsearch equivalent, naming it and its line.
    """
    source, sweep = Source.of_yaml(path)
    if not isinstance(sweep, dict) or "parameters" not in sweep:
        raise source.error((), "not a W&B sweep (no parameters: section)")
    source.refuse_unknown(sweep, _TOP_KEYS)
    notes: list[str] = []
    method = sweep.get("method", "random")
    if method not in _SAMPLERS:
        raise source.error(("method",), f"'{method}' is not a W&B method", "bayes, random or grid")
    space, key_of = _space(source, sweep["parameters"], notes, grid=method == "grid")
    checked_space(source, space, key_of)

    study = _study(source, sweep, space, notes)
    config: dict[str, Any] = {"study": study}
    if "metric" in sweep:
        config["objective"] = _objective(source, sweep["metric"])
    groups = [str(n) for n, spec in sweep["parameters"].items() if "parameters" in spec]
    if "program" in sweep or "command" in sweep:
        config["train"] = _train(source, sweep)
        notes.append(
            "import wandb in the program is hpsearch's (W&B is not sent anything): wandb.config "
            "holds the trial's parameters, each wandb.log is a report, and the objective is "
            "the metric's last logged value, as a sweep reads it from the run's summary."
        )
    train_env = {WANDB_NESTED_VARIABLE: ",".join(groups)} if groups else {}
    if groups:
        example = next(name for name in space if name.startswith(f"{groups[0]}."))
        notes.append(
            f"Nested parameters ({', '.join(groups)}): searched under dotted names "
            f"({example}, ...); wandb.config holds them nested, as W&B's ({WANDB_NESTED_VARIABLE} "
            f"names the groups), and {{args}} passes each as --{example}=... (W&B: "
            f"--{groups[0]}={{...}})."
        )
    config["space"] = space
    if "project" in sweep:
        config["tracking"] = {"experiment": str(sweep["project"])}
    if "description" in sweep:
        notes.append(f"Description: {sweep['description']}")
    if "entity" in sweep:
        notes.append(f"entity {sweep['entity']}: a W&B team; MLflow has none, so it was left out.")
    return Converted(config, "a W&B sweep", notes, train_env)


def _study(
    source: Source, sweep: dict[str, Any], space: dict[str, Any], notes: list[str]
) -> dict[str, Any]:
    """``study``: its name, sampler, budget and pruner."""
    method = sweep.get("method", "random")
    study: dict[str, Any] = {"name": str(sweep.get("name") or source.path.stem)}
    study["sampler"] = {"type": _SAMPLERS[method]}
    if method == "bayes":
        notes.append("method bayes: TPE, Optuna's default Bayesian sampler (gp is its GP one).")
    if "run_cap" in sweep:
        study["n_trials"] = sweep["run_cap"]
    elif method == "grid":
        study["n_trials"] = math.prod(len(v) for v in space.values() if isinstance(v, list))
    # Else the file's head says study.n_trials is still to add (Converted.missing), unless
    # hpsearch convert --n-trials gave it.
    if "early_terminate" in sweep:
        study["pruner"] = _pruner(source, sweep["early_terminate"])
    return study


def _space(
    source: Source,
    parameters: Any,
    notes: list[str],
    *,
    grid: bool,
    within: tuple[str | int, ...] = (),
) -> tuple[dict[str, Any], dict[str, tuple[str | int, ...]]]:
    """The ``space`` of ``parameters`` (at ``within`` in the source: a nested group's),
    and each entry's key in the source. A nested group's parameters are named
    ``group.name``, as ``wandb.config["group"]["name"]`` reads them."""
    key: tuple[str | int, ...] = (*within, "parameters")
    if not isinstance(parameters, dict) or not parameters:
        raise source.error(key, "must map each parameter to its values or range")
    space: dict[str, Any] = {}
    key_of: dict[str, tuple[str | int, ...]] = {}
    prefix = ".".join(str(part) for part in within[1::2])
    for name, spec in parameters.items():
        at = (*key, name)
        full = f"{prefix}.{name}" if prefix else str(name)
        if not isinstance(spec, dict):
            raise source.error(at, "must be a mapping (value, values, or min and max)")
        if "parameters" in spec:
            for other in spec:
                if other != "parameters":
                    raise source.error((*at, other), "beside parameters", "remove one of them")
            inner, inner_keys = _space(source, spec["parameters"], notes, grid=grid, within=at)
            for inner_name in inner:
                _unique(source, space, inner_name, inner_keys[inner_name])
            space.update(inner)
            key_of.update(inner_keys)
            continue
        _unique(source, space, full, at)
        space[full] = _parameter(source, at, spec, notes)
        key_of[full] = at
        if grid and not isinstance(space[full], list) and "value" not in spec:
            raise source.error(at, "method grid takes values only", "list its values")
    return space, key_of


def _unique(source: Source, space: dict[str, Any], name: str, at: tuple[str | int, ...]) -> None:
    """Refuse a second parameter named ``name`` (a dotted one beside a nested group's)."""
    if name in space:
        raise source.error(at, f"is the parameter {name} a second time", "rename one of them")


def _parameter(
    source: Source, key: tuple[str | int, ...], spec: dict[str, Any], notes: list[str]
) -> Any:
    distribution = spec.get("distribution") or _inferred(spec)
    if distribution in _NO_DISTRIBUTION:
        raise source.error(
            (*key, "distribution"),
            f"'{distribution}' has no Optuna distribution",
            "use uniform, int_uniform, q_uniform or log_uniform_values",
        )
    _check_keys(source, key, spec)
    if distribution is None:
        raise source.error(key, "has no value, values, or min and max")
    if distribution in _LOG_STEPPED and "min" in spec and "max" in spec:
        return _log_stepped(key, spec, distribution, notes)
    if "q" in spec and distribution != "q_uniform":
        raise source.error((*key, "q"), f"a step of {distribution}", "use distribution: q_uniform")
    if distribution == "constant":
        value = spec["value"]
        plain = not isinstance(value, list | dict)
        return value if plain else {"type": "constant", "value": value}
    if distribution == "categorical":
        values = spec.get("values")
        if not isinstance(values, list):
            raise source.error((*key, "values"), "must be a list")
        return list(values)
    if distribution not in _RANGES:
        raise source.error((*key, "distribution"), f"'{distribution}' is not a W&B distribution")
    if "min" not in spec or "max" not in spec:
        raise source.error(key, f"distribution {distribution} needs min and max")
    return _RANGES[distribution](spec)


def _check_keys(source: Source, key: tuple[str | int, ...], spec: dict[str, Any]) -> None:
    for name in spec:
        if name in _NOT_CONVERTED:
            raise source.error((*key, name), _NOT_CONVERTED[name], "remove it")
        if name not in _PARAM_KEYS:
            raise source.error((*key, name), "is not a W&B parameter key")


_RANGES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "int_uniform": lambda s: {"type": "int", "low": int(s["min"]), "high": int(s["max"])},
    "uniform": lambda s: {"type": "float", "low": float(s["min"]), "high": float(s["max"])},
    "q_uniform": lambda s: _stepped(s["min"], s["max"], s.get("q", 1)),
    "log_uniform_values": lambda s: {
        "type": "float", "low": float(s["min"]), "high": float(s["max"]), "log": True
    },
    # W&B's log_uniform bounds are natural-log exponents.
    "log_uniform": lambda s: {
        "type": "float", "low": math.exp(s["min"]), "high": math.exp(s["max"]), "log": True
    },
}  # fmt: skip
"""W&B's range distributions, as ``space`` entries."""


def _stepped(low: float, high: float, step: float) -> dict[str, Any]:
    """q_uniform: whole numbers stay integers (a batch size), else a float grid."""
    if all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high, step)):
        return {"type": "int", "low": low, "high": high, "step": step}
    return {"type": "float", "low": float(low), "high": float(high), "step": step}


_LOG_STEPPED = {"q_log_uniform_values": False, "q_log_uniform": True}
"""W&B's quantized log distributions, and whether their bounds are exponents of e."""


def _log_stepped(
    key: tuple[str | int, ...], spec: dict[str, Any], distribution: str, notes: list[str]
) -> dict[str, Any]:
    """A quantized log distribution on its log range, without its step (see the module)."""
    exponents = _LOG_STEPPED[distribution]
    low, high = (math.exp(spec[k]) if exponents else spec[k] for k in ("min", "max"))
    return log_range_unstepped(key, distribution, low, high, spec.get("q", 1), notes=notes)


def _inferred(spec: dict[str, Any]) -> str | None:
    """The distribution W&B takes when none is given."""
    if "values" in spec:
        return "categorical"
    if "value" in spec:
        return "constant"
    if "min" in spec and "max" in spec:
        ints = all(
            isinstance(spec[k], int) and not isinstance(spec[k], bool) for k in ("min", "max")
        )
        return "int_uniform" if ints else "uniform"
    return None


def _objective(source: Source, metric: Any) -> dict[str, str]:
    if not isinstance(metric, dict) or "name" not in metric:
        raise source.error(("metric",), "needs a name", "metric: {name: val_loss, goal: minimize}")
    if "target" in metric:
        raise source.error(
            ("metric", "target"),
            "hpsearch does not end a search when one trial reaches a value",
            "remove it (study.n_trials or study.timeout end a search)",
        )
    goal = metric.get("goal", "minimize")
    if goal not in ("minimize", "maximize"):
        raise source.error(("metric", "goal"), f"'{goal}' is not minimize or maximize")
    return {"metric": str(metric["name"]), "direction": goal}


def _pruner(source: Source, early: Any) -> dict[str, Any]:
    if not isinstance(early, dict) or early.get("type") != "hyperband":
        raise source.error(("early_terminate", "type"), "W&B's early termination is hyperband")
    for key in early:
        if key not in ("type", "min_iter", "max_iter", "eta", "s"):
            raise source.error(("early_terminate", key), "has no Optuna Hyperband equivalent")
    eta = early.get("eta", 3)
    options: dict[str, Any] = {"reduction_factor": eta}
    if "min_iter" in early:
        options["min_resource"] = early["min_iter"]
    if "max_iter" in early:
        options["max_resource"] = early["max_iter"]
        if "s" in early and "min_iter" not in early:  # W&B's brackets below max_iter
            options["min_resource"] = max(1, round(early["max_iter"] / eta ** early["s"]))
    elif "s" in early:
        raise source.error(("early_terminate", "s"), "needs max_iter", "give max_iter or min_iter")
    return {"type": "hyperband", "options": options}


def _train(source: Source, sweep: dict[str, Any]) -> dict[str, Any]:
    program = sweep.get("program")
    words = sweep.get("command", _DEFAULT_COMMAND)
    if not isinstance(words, list) or not words:
        raise source.error(("command",), "must be a list of arguments")
    arguments: list[str] = []
    for index, written in enumerate(words):
        word = str(written)
        if word == "${env}":
            continue  # W&B's /usr/bin/env; hpsearch runs the command as it is
        if word == "${interpreter}":
            if program is not None and not str(program).endswith(".py"):
                continue  # W&B runs any other program by itself
            arguments.append("python")
        elif word == "${program}":
            if program is None:
                raise source.error(("command", index), "names ${program}", "add program: ...")
            arguments.append(str(program))
        elif word.startswith("$") and arg_form(word[1:]) is not None:
            arguments.append(word[1:])  # ${args_no_hyphens}: {args_no_hyphens}, the same form
        elif word.startswith("${"):
            raise source.error(
                ("command", index),
                f"{word} has no hpsearch equivalent",
                f"use one of {', '.join('${' + form + '}' for form in ARG_FORMS)}",
            )
        else:
            arguments.append(word)
    return {"command": command_line(arguments), "metrics": {"scalars": True}}
