"""Reading a config file into a :class:`RunConfig`, with errors a person can act on."""

from __future__ import annotations

import difflib
import json
import os
import re
import types
import typing
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Tag, ValidationError
from pydantic_core import ErrorDetails

from hpsearch.adapters.tune_space import TuneSpaceWarning
from hpsearch.config._schema import ConfigKeyWarning, PrunerSpec, RunConfig
from hpsearch.config._yaml import KeyPath, YamlDocument, read_yaml
from hpsearch.errors import ConfigError

_TYPE_WORDS = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "dict_type": "a mapping (key: value lines)",
    "model_type": "a mapping (key: value lines)",
    "model_attributes_type": "a mapping (key: value lines)",
    "list_type": "a list",
}


_OTHER_TOOLS_KEYS = {"min": "low", "max": "high", "values": "choices", "q": "step"}
"""A range's words in W&B sweeps, NNI and Ray Tune, and this config's for them."""
_OTHER_TOOLS_WORDS: dict[tuple[str, str], tuple[str, str]] = {
    ("objective", "mode"): ("Ray Tune", "write direction: minimize (Tune's min) or maximize (max)"),
    ("objective", "goal"): ("W&B", "write direction: minimize or maximize, as the goal was"),
    ("objective", "name"): ("W&B", "write metric: NAME, the metric the trials report"),
    ("study", "num_samples"): ("Ray Tune", "write n_trials: N"),
    ("study", "time_budget_s"): ("Ray Tune", "write timeout: seconds (or 15m, 1h30m)"),
    ("study", "search_alg"): ("Ray Tune", "write sampler: {type: tpe} (any Optuna sampler)"),
    ("study", "scheduler"): (
        "Ray Tune",
        "write pruner: {type: successive_halving} (Tune's ASHA; or hyperband, median)",
    ),
    ("execution", "max_concurrent_trials"): ("Ray Tune", "write max_concurrent: N"),
    ("execution", "resources_per_trial"): (
        "Ray Tune",
        "write cpus_per_trial: N for its CPUs; its GPU share is packing's: packing: {mode: "
        "fixed, trials_per_gpu: N} gives each trial 1/N of a GPU, auto measures how many fit",
    ),
    ("execution", "gpus_per_trial"): (
        "Ray Tune",
        "a trial's GPU share is packing's: packing: {mode: fixed, trials_per_gpu: N} gives "
        "each trial 1/N of a GPU (mode: off, a whole one), auto measures how many fit",
    ),
}
"""Other tools' words (Ray Tune's ``TuneConfig`` and ``tune.with_resources``, a W&B
sweep's ``metric``) where this config has its own, by section and key (an entry of
``objectives`` as ``objective``): the tool, and what to write instead."""
_OTHER_TOOLS_TYPES = {
    "uniform": "{type: float, low: .., high: ..}",
    "loguniform": "{type: float, low: .., high: .., log: true}",
    "log_uniform": "{type: float, low: .., high: .., log: true}",
    "log_uniform_values": "{type: float, low: .., high: .., log: true}",
    "quniform": "{type: float, low: .., high: .., step: Q}",
    "randint": "{type: int, low: .., high: ..}",
    "int_uniform": "{type: int, low: .., high: ..}",
    "qrandint": "{type: int, low: .., high: .., step: Q}",
    "lograndint": "{type: int, low: .., high: .., log: true}",
    "choice": "{type: categorical, choices: [...]}, or the list of choices alone",
}
"""Distribution names of W&B sweeps, NNI and Ray Tune, as this config writes them."""

_OTHER_TOOLS_PRUNERS = {
    "asha": "successive_halving",
    "ashascheduler": "successive_halving",
    "async_hyperband": "successive_halving",
    "asynchyperbandscheduler": "successive_halving",
    "hyperbandscheduler": "hyperband",
    "median_stopping": "median",
    "medianstoppingrule": "median",
    "median_stopping_rule": "median",
    "fifo": "none",
    "fifoscheduler": "none",
}
"""Ray Tune's schedulers, as this config's ``study.pruner`` names them."""


MOVED_KEYS: dict[KeyPath, tuple[str, str]] = {
    ("execution", "trials_per_gpu"): (
        "packing.trials_per_gpu",
        "write packing: {mode: fixed, trials_per_gpu: N} (0: trials on CPU only)",
    ),
}
"""Keys that moved: the one spelling each knob has now, and what to write instead."""


DICT_SOURCE = "<dict>"
"""What a config given as a dict is called in its errors (it has no file)."""


def load_config(path: str | os.PathLike[str] | Mapping[str, Any]) -> RunConfig:
    """Read and validate one config file, or a dict of the same sections (``hpsearch.run``
    from a notebook), checked alike.

    Raises:
        ConfigError: naming the file (``<dict>``), the line, the key path and the fix.
    """
    if isinstance(path, Mapping):
        return _validated(Path(DICT_SOURCE), YamlDocument(_functions_named(path)))
    source = Path(path)
    document = read_yaml(source)
    if document.data is None:
        raise ConfigError(source, "", "the file is empty", "see configs/debug.yaml for an example")
    return _validated(source, document)


_FUNCTION_KEYS: tuple[tuple[str, ...], ...] = (
    ("train",),
    ("train", "optuna"),
    ("train", "tune"),
    ("fusion", "train"),
)
"""Where a config names a function that each trial's worker calls."""


def _functions_named(given: Mapping[str, Any]) -> dict[str, Any]:
    """A dict config with each function it holds itself (``"train": train``) replaced by
    the name a file would give it, the function sent by value where a worker could not
    import it by that name (:func:`hpsearch.adapters.named_function`).

    Raises:
        ConfigError: a function that cannot be sent to the workers.
    """
    data = dict(given)
    for keys in _FUNCTION_KEYS:
        *outer, last = keys
        section: Any = data
        for key in outer:
            section = section.get(key) if isinstance(section, Mapping) else None
        if not isinstance(section, Mapping) or not callable(section.get(last)):
            continue
        from hpsearch.adapters.by_value import named_function

        name = named_function(section[last], DICT_SOURCE, ".".join(keys))
        if not outer:
            data[last] = name
        else:
            data[outer[0]] = {**section, last: name}
    return _sampler_functions_named(data)


def _sampler_functions_named(data: dict[str, Any]) -> dict[str, Any]:
    """``study.sampler.options`` with each function among them (``constraints_func``) named
    as :func:`_functions_named` names ``train``, so the study can record the config; the
    sampler imports it by that name, or takes it back by value."""
    study = data.get("study")
    sampler = study.get("sampler") if isinstance(study, Mapping) else None
    options = sampler.get("options") if isinstance(sampler, Mapping) else None
    if not isinstance(study, Mapping) or not isinstance(sampler, Mapping):
        return data
    if not isinstance(options, Mapping):
        return data
    functions = {k: v for k, v in options.items() if callable(v) and not isinstance(v, type)}
    if not functions:
        return data
    from hpsearch.adapters.by_value import named_function

    named = {
        option: named_function(function, DICT_SOURCE, f"study.sampler.options.{option}")
        for option, function in functions.items()
    }
    options = {**options, **named}
    return {**data, "study": {**study, "sampler": {**sampler, "options": options}}}


def _validated(source: Path, document: YamlDocument) -> RunConfig:
    if not isinstance(document.data, dict):
        raise ConfigError(
            source,
            "",
            "the top level must be a mapping of sections (study, objective, train, space, ...)",
        )
    with warnings.catch_warnings(record=True) as said:
        # Only the param_space's are moved; the others were filtered as always.
        warnings.simplefilter("always", TuneSpaceWarning)
        try:
            config = RunConfig.model_validate(document.data)
        except ValidationError as exc:
            raise _to_config_error(source, document, exc) from None
    _say_again(said, source, document)
    config._source = str(source)
    return config


def _say_again(said: list[warnings.WarningMessage], source: Path, document: YamlDocument) -> None:
    """The warnings validation gave, said again: a Tune param_space's (the ``space``
    entry it came from) at the config's ``space`` line, the others where they were."""
    for warning in said:
        if issubclass(warning.category, TuneSpaceWarning):
            line = document.line_of(("space",)) or 1
            warnings.warn_explicit(f"space: {warning.message}", warning.category, str(source), line)
        elif issubclass(warning.category, ConfigKeyWarning):
            key = str(warning.message).split(":", 1)[0]
            line = document.line_of(tuple(key.split("."))) or 1
            warnings.warn_explicit(warning.message, warning.category, str(source), line)
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )


NNI_EXPERIMENT_KEYS = frozenset(
    {
        "searchSpace",
        "searchSpaceFile",
        "searchSpacePath",  # NNI 1's
        "trialCommand",
        "trialConcurrency",
        "maxTrialNumber",
        "tuner",
        "trainingService",
    }
)
"""Top-level keys of an NNI experiment's config (``hpsearch convert`` reads it as one)."""
_OTHER_TOOLS_FILES = {
    "a W&B sweep": frozenset({"method", "parameters", "program", "early_terminate", "run_cap"}),
    "an NNI experiment": NNI_EXPERIMENT_KEYS,
}
"""Top-level keys that say a file is another tool's, which ``hpsearch convert`` reads."""


def _another_tools_file(source: Path, data: Any) -> ConfigError | None:
    """The error for a W&B sweep or an NNI experiment given as a config: convert it."""
    if not isinstance(data, dict) or {"study", "train"} & set(data):
        return None
    for tool, keys in _OTHER_TOOLS_FILES.items():
        if len(keys & set(data)) >= 2:
            return ConfigError(
                source,
                "",
                f"this is {tool}, not an hpsearch config",
                f"hpsearch convert {source} -o config.yaml writes the config it describes",
            )
    return None


def _to_config_error(source: Path, document: YamlDocument, exc: ValidationError) -> ConfigError:
    theirs = _another_tools_file(source, document.data)
    if theirs is not None:
        return theirs
    errors = _branch_chosen(exc.errors(include_url=False), document.data)
    # A misspelt key also makes the intended key "missing"; the misspelling is the
    # cause, so unknown keys are reported first.
    errors.sort(key=lambda e: e["type"] != "extra_forbidden")
    first, *others = [_one_error(source, document, error) for error in errors]
    return ConfigError(
        source, first.key, first.problem, first.fix, line=first.line, others=tuple(others)
    )


def _one_error(source: Path, document: YamlDocument, error: ErrorDetails) -> ConfigError:
    key_path = _user_path(error["loc"])
    problem, fix = _describe(error, key_path)
    return ConfigError(
        source,
        ".".join(str(p) for p in key_path),
        problem,
        fix,
        line=document.line_of(key_path),
    )


def _unknown_key(error: ErrorDetails, key_path: KeyPath) -> tuple[str, str]:  # noqa: PLR0911
    """Problem and fix for a key the section does not have."""
    moved = MOVED_KEYS.get(key_path)
    if moved is not None:
        return f"this key is now {moved[0]}", moved[1]
    name = str(key_path[-1]) if key_path else "?"
    valid = _valid_keys(error["loc"][:-1])
    here = tuple(str(p) for p in key_path[:-1])
    section = ".".join(p for p in here if not p.isdigit())
    word = _OTHER_TOOLS_WORDS.get(("objective" if section == "objectives" else section, name))
    if word is not None:
        return f"unknown key '{name}' (a {word[0]} word)", word[1]
    homes = _homes(name, here) if here[:1] != ("space",) else []
    if len(homes) == 1:
        # A key of another section, written here (n_trials at the top, not under study):
        # where it goes says more than the nearest spelling of this section's keys.
        return f"unknown key '{name}' here", _written_under(homes[0], error.get("input"))
    if homes:
        return f"unknown key '{name}' here", (
            f"it is a key of {' and '.join('.'.join(h[:-1]) for h in homes)}: "
            "write it under the one you mean"
        )
    ours = _OTHER_TOOLS_KEYS.get(name)
    close = [ours] if ours in valid else difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
    if close:
        return f"unknown key '{name}'", f"did you mean '{close[0]}'?"
    if key_path[:-1] in _CONSTRUCTED and "options" in valid:
        # Optuna's keyword (MedianPruner(n_startup_trials=5)), written beside type.
        given = error.get("input")
        written = json.dumps(given) if isinstance(given, str | int | float | bool) else "..."
        return f"unknown key '{name}'", (
            f"the {key_path[-2]}'s own arguments go under options: write "
            f"options: {{{name}: {written}}}"
        )
    return f"unknown key '{name}'", f"valid keys here: {', '.join(valid)}"


def _describe(error: ErrorDetails, key_path: KeyPath) -> tuple[str, str]:  # noqa: PLR0911, PLR0912
    """Problem and fix for one pydantic error (one flat case per error kind)."""
    kind = error["type"]
    ctx = error.get("ctx", {})
    given = error.get("input")
    if kind == "extra_forbidden":
        return _unknown_key(error, key_path)
    if kind == "missing":
        return "required key is missing", _missing_fix(error["loc"])
    if kind == "literal_error":
        options = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        lowered = {option.lower(): option for option in options}  # MAXIMIZE, Median
        close = difflib.get_close_matches(str(given).lower(), list(lowered), n=1, cutoff=0.5)
        fix = (
            f"did you mean '{lowered[close[0]]}'?" if close else f"use one of: {', '.join(options)}"
        )
        ours = _OTHER_TOOLS_PRUNERS.get(str(given).lower())
        if key_path[-2:] == ("pruner", "type") and ours is not None:
            fix = f"Ray Tune's {given} is this config's pruner {ours}: write type: {ours}"
        if given is True:  # YAML 1.1 reads a bare on, yes or true as true: not a word here
            return "a YAML true (on, yes, true) is not allowed", f"use one of: {', '.join(options)}"
        return f"'{given}' is not allowed", fix
    if kind == "union_tag_invalid":
        options = re.findall(r"'([^']*)'", str(ctx.get("expected_tags", "")))
        close = difflib.get_close_matches(str(ctx.get("tag")), options, n=1, cutoff=0.5)
        fix = f"did you mean '{close[0]}'?" if close else f"use one of: {', '.join(options)}"
        theirs = _OTHER_TOOLS_TYPES.get(str(ctx.get("tag")))
        if theirs is not None:
            fix = f"write {theirs}"
        return f"unknown type '{ctx.get('tag')}'", fix
    if kind == "union_tag_not_found":
        fix = _typed_range(given) or (
            "write {type: float|int|categorical, ...}, a list of choices, or a plain constant"
        )
        if isinstance(given, dict) and ({"distribution", "_type"} & set(given)):
            # A parameter copied from a W&B sweep or an NNI search space.
            fix += "; hpsearch convert FILE turns a W&B sweep or an NNI space into a config"
        return "a range needs a 'type'", fix
    if kind == "invalid_space":
        return str(ctx.get("problem")), str(ctx.get("fix"))
    if kind == "string_pattern_mismatch" and key_path == ("train",):
        return f"'{given}' is not of the form package.module:function", _train_fix(str(given))
    if kind in _TYPE_WORDS and (optuna_object := _optuna_object(given, key_path)) is not None:
        return optuna_object
    if kind in _TYPE_WORDS and key_path in _SECTION_FIXES:
        return f"expected {_TYPE_WORDS[kind]}, got {_show(given)}", _SECTION_FIXES[key_path](given)
    if kind in _TYPE_WORDS:
        wanted = _TYPE_WORDS[kind]
        if isinstance(given, str) and wanted in ("a number", "an integer"):
            fix = "write the number without quotes"
        elif isinstance(given, str) and "type" in _valid_keys(error["loc"]):
            fix = f"write {{type: {given}}}"  # sampler: tpe, pruner: median
        else:
            fix = f"write {wanted}"
        if given is False and _nullable(key_path):  # "off", as YAML reads it
            fix += ", or null for none"
        return f"expected {wanted}, got {_show(given)}", fix
    if kind == "string_too_short" and given == "":
        fix = _EMPTY_FIXES.get(tuple(str(k) for k in key_path[-2:])) or _EMPTY_FIXES.get(
            (str(key_path[-1]),), "a value"
        )
        return "is empty", f"write {fix}"
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_short"}:
        fix = "change the value"
        if given in (0, False) and _nullable(key_path):  # 0 as "none", as other tools take it
            fix += ", or write null for none"
        return f"{error['msg'].lower()} (got {_show(given)})", fix
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message.removeprefix("Value error, ")
    problem, _, fix = message.partition("; ")
    return problem, fix or "change the value"


_EMPTY_FIXES: dict[tuple[str, ...], str] = {
    ("metric",): "the name of a metric the training function reports, e.g. val_accuracy",
    ("sampler", "type"): "a sampler's type, e.g. tpe",
}
"""What an empty value (``metric: ""``) is to be instead, by its key (and its section's)."""

_CONSTRUCTED: frozenset[KeyPath] = frozenset({("study", "sampler"), ("study", "pruner")})
"""The sections that name an Optuna class and pass their ``options`` to its constructor."""

_SECTION_FIXES: dict[KeyPath, Callable[[Any], str]] = {
    ("objective",): lambda given: (
        f"write {{metric: {given}, direction: maximize}} (or minimize)"
        if isinstance(given, str)
        # Several, as Optuna's directions=[...] lists them: the list has its own key.
        else "several objectives are a list under objectives: (objectives: [{metric: A, "
        "direction: maximize}, {metric: B, direction: minimize}]), or write one as "
        "objective: {metric: A, direction: maximize}"
        if isinstance(given, list)
        else "write {metric: NAME, direction: maximize} (or minimize)"
    ),
    ("objectives",): lambda _: (
        "write a list, objectives: [{metric: A, direction: maximize}, {metric: B, "
        "direction: minimize}], or one as objective: {metric: A, direction: maximize}"
    ),
    ("packing",): lambda given: f"write packing: {{mode: {_as_mode(given)}}}",
    ("fusion",): lambda given: f"write fusion: {{mode: {_as_mode(given)}}}",
    ("telemetry",): lambda given: f"write telemetry: {{backend: {_as_mode(given)}}}",
}
"""The fix for a section given in the wrong form, by what it was given."""


def _as_mode(given: Any) -> str:
    """A section given as its mode alone (``packing: off``, which YAML 1.1 reads as false):
    the mode, in the section's words."""
    if given is False:
        return "off"
    return given if isinstance(given, str) and given.isidentifier() else "..."


def _typed_range(given: Any) -> str:
    """The fix for a range written without its ``type`` (W&B's ``{min: 1, max: 8}``, or
    ``{low: .., high: ..}``): the range with the type its bounds say, or W&B's choices or
    constant as this config writes them; empty if it says none of these."""
    if not isinstance(given, dict):
        return ""
    if isinstance(given.get("values"), list):  # W&B's and NNI's choices
        return f"write the list of choices alone: {given['values']}"
    if "value" in given and len(given) == 1:  # W&B's constant
        return f"write the constant alone: {given['value']}"
    low, high = given.get("low", given.get("min")), given.get("high", given.get("max"))
    numbers = (low, high)
    if not all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers):
        return ""
    kind = "int" if all(isinstance(n, int) for n in numbers) else "float"
    shown = {key: given[key] for key in ("step", "log") if key in given}
    distribution = given.get("distribution")
    if distribution is not None:
        # A W&B parameter: its distribution says the type and scale its bounds alone do
        # not. Others (log_uniform's bounds are exponents, q_*, normal) are convert's.
        if distribution not in _WANDB_RANGES:
            return ""
        kind, log = _WANDB_RANGES[distribution]
        shown = {"log": True} if log else {}
    more = "".join(f", {key}: {str(value).lower()}" for key, value in shown.items())
    return f"write {{type: {kind}, low: {low}, high: {high}{more}}}"


_WANDB_RANGES = {
    "uniform": ("float", False),
    "int_uniform": ("int", False),
    "log_uniform_values": ("float", True),
}
"""W&B's distributions of a range between its bounds, as this config types them."""


def _optuna_object(given: Any, key_path: KeyPath) -> tuple[str, str] | None:
    """Problem and fix for an Optuna sampler or pruner given as an object (a dict
    config's ``"sampler": TPESampler(seed=1)``, as ``optuna.create_study`` takes it)."""
    kind = type(given)
    if key_path not in (("study", "sampler"), ("study", "pruner")):
        return None
    family = f"optuna.{key_path[1]}s"  # its base class's package: any subclass counts
    if not any(c.__module__.startswith(family) for c in kind.__mro__):
        return None
    problem = f"an Optuna {kind.__name__} object cannot be given here"
    if key_path[1] == "sampler":
        ours = kind.__module__.startswith(family)
        name = f"{family}.{kind.__name__}" if ours else f"{kind.__module__}:{kind.__qualname__}"
        return problem, (
            f"name it, its arguments as options: {{'type': '{name}', 'seed': N, "
            "'options': {...}} (or a short name: 'tpe', 'random', 'gp', ...)"
        )
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", kind.__name__.removesuffix("Pruner")).lower()
    snake = "none" if snake == "nop" else snake
    names = typing.get_args(PrunerSpec.model_fields["type"].annotation)
    if snake in names:
        return (
            problem,
            f"name it, its arguments as options: {{'type': '{snake}', 'options': {{...}}}}",
        )
    return (
        problem,
        f"name one of hpsearch's pruners, {{'type': ..., 'options': {{...}}}}: {', '.join(names)}",
    )


def _show(value: Any) -> str:
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict | list):
        return type(value).__name__.replace("dict", "a mapping").replace("list", "a list")
    return repr(value)


def _user_path(loc: Sequence[str | int]) -> KeyPath:
    """The key path as written in YAML, without the union tags pydantic inserts.

    Pydantic reports ``space.lr.float.low``; the user wrote ``space.lr.low``.
    """
    path: list[str | int] = []
    node: Any = RunConfig
    for element in loc:
        node, is_tag = _step(node, element)
        if not is_tag:
            path.append(element)
    return tuple(path)


def _nullable(key_path: KeyPath) -> bool:
    """Whether the setting at ``key_path`` (the user's keys) takes ``null``."""
    node: Any = RunConfig
    for key in key_path[:-1]:
        node, _ = _step(node, key)
    if not key_path or not (isinstance(node, type) and issubclass(node, BaseModel)):
        return False
    field = node.model_fields.get(str(key_path[-1]))
    return field is not None and type(None) in typing.get_args(field.annotation)


def _homes(name: str, here: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Where else in the config ``name`` is a key: its shallowest places outside ``here``."""
    found: list[tuple[str, ...]] = []

    def walk(model: type[BaseModel], path: tuple[str, ...]) -> None:
        for field, info in model.model_fields.items():
            if field == name and path != here:
                found.append((*path, field))
            inner = _unwrap(info.annotation)
            if isinstance(inner, type) and issubclass(inner, BaseModel) and len(path) < 3:
                walk(inner, (*path, field))

    walk(RunConfig, ())
    shallowest = min((len(p) for p in found), default=0)
    return [p for p in found if len(p) == shallowest]


def _written_under(home: tuple[str, ...], given: object) -> str:
    """The fix for a key written outside its section: the section, and the key in it."""
    section: Any = RunConfig
    for part in home:
        section, _ = _step(section, part)
    takes_mapping = isinstance(section, type) and issubclass(section, BaseModel)
    value = "..."
    if isinstance(given, dict) or not takes_mapping:  # a scalar there would be refused
        text = yaml.safe_dump(given, default_flow_style=True, width=1000).strip()
        text = text.removesuffix("...").strip()
        if len(text) <= 60 and "\n" not in text:
            value = text
    written = f"{home[-1]}: {value}"
    for part in reversed(home[:-1]):
        written = f"{part}: {{{written}}}"
    return f"it belongs under {'.'.join(home[:-1])}: write {written}"


def _missing_fix(loc: Sequence[str | int]) -> str:
    """The fix for a required key left out: its values, where it takes a few."""
    node: Any = RunConfig
    for element in loc:
        node, _ = _step(node, element)
    if typing.get_origin(node) is typing.Literal and loc:
        values = " or ".join(str(value) for value in typing.get_args(node))
        return f"add it: {loc[-1]}: {values}"
    if tuple(loc) == ("train",):
        return (
            "add what each trial runs: train: mypkg.train:train (a training function), "
            "{optuna: mypkg:objective}, {tune: mypkg:train_fn} or {command: python train.py "
            "{args}}"
        )
    return "add it"


def _valid_keys(loc: Sequence[str | int]) -> list[str]:
    """Field names of the section at ``loc`` (a pydantic location, tags included)."""
    node: Any = RunConfig
    for element in loc:
        node, _ = _step(node, element)
    if isinstance(node, type) and issubclass(node, BaseModel):
        return list(node.model_fields)
    return []


def _step(node: Any, element: str | int) -> tuple[Any, bool]:
    """Follow one element of a pydantic location through the schema types.

    Returns the type reached and whether the element was a union tag rather than a key.
    """
    node = _unwrap(node)
    if isinstance(node, type) and issubclass(node, BaseModel):
        field = node.model_fields.get(str(element))
        return (_unwrap(field.annotation) if field else None), False
    origin = typing.get_origin(node)
    if origin is dict:
        return _unwrap(typing.get_args(node)[1]), False
    if origin is list:
        return _unwrap(typing.get_args(node)[0]), False
    if origin in (typing.Union, types.UnionType):
        return _union_step(node, element)
    return None, False


def _union_step(union: Any, element: str | int) -> tuple[Any, bool]:
    """Follow a union tag (a discriminator's value, or a plain union's branch)."""
    if isinstance(element, str) and (member := _branch_member(union, element)) is not None:
        return _unwrap(member), True
    for member in typing.get_args(union):
        if typing.get_origin(member) is typing.Annotated and any(
            isinstance(m, Tag) and m.tag == element for m in typing.get_args(member)[1:]
        ):
            return _unwrap(member), True
        if isinstance(member, type) and issubclass(member, BaseModel):
            tag = member.model_fields.get("type")
            if tag is not None and element in typing.get_args(tag.annotation):
                return member, True
    return None, False


def _branch_member(union: Any, tag: str) -> Any:
    """The member of ``union`` that pydantic's branch ``tag`` stands for (``None``: none)."""
    for member in typing.get_args(union):
        if typing.get_origin(member) is typing.Literal and tag.startswith("literal["):
            return member
        name = member.__name__ if isinstance(member, type) else str(member)  # list[str]
        if tag == name or tag.endswith(f" {name}]"):
            return member
    return None


def _branch_kind(tag: str | int) -> str:
    """The form of value a union's branch takes: a string, a list, a number or a mapping."""
    tag = str(tag)
    if tag.startswith("literal[") or tag in ("str", "constrained-str"):
        return "str"
    if tag.startswith(("list[", "tuple[", "set[")):
        return "list"
    if tag in ("int", "float", "bool"):
        return "number"
    return "mapping"


def _form_of(value: Any) -> str | None:
    """The form of a value as :func:`_branch_kind` names a branch's."""
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, str):
        return "str"
    return "number" if isinstance(value, int | float) else None


def _branch_chosen(errors: list[ErrorDetails], data: Any) -> list[ErrorDetails]:
    """The errors of the branch of a union that its value's form chose, the other
    branches' left out: ``train.metrics`` is a name or a mapping, so a mapping's errors
    are its keys', not "'{...}' is not allowed"; ``train.command`` a string or a list, so
    a list's are its items'. A value of no branch's form gets the first branch's."""
    unions: dict[tuple[str | int, ...], list[ErrorDetails]] = {}
    for error in errors:
        for at in _union_tags(error["loc"]):
            unions.setdefault(tuple(error["loc"][:at]), []).append(error)
    left_out: list[ErrorDetails] = []
    for prefix, group in unions.items():
        tags = list(dict.fromkeys(e["loc"][len(prefix)] for e in group))
        if len(tags) < 2:
            continue
        form = _form_of(_value_at(data, _user_path(prefix)))
        chosen = [t for t in tags if _branch_kind(t) == form] or tags[:1]
        left_out += [e for e in group if e["loc"][len(prefix)] not in chosen]
    return [e for e in errors if not any(e is out for out in left_out)]


def _union_tags(loc: Sequence[str | int]) -> list[int]:
    """Where in ``loc`` a union's branch is named (its tag), outermost first."""
    node: Any = RunConfig
    tags: list[int] = []
    for index, element in enumerate(loc):
        node, is_tag = _step(node, element)
        if is_tag:
            tags.append(index)
    return tags


def _value_at(data: Any, path: KeyPath) -> Any:
    """The value the document holds at ``path`` (``None``: not there)."""
    for key in path:
        if isinstance(data, dict):
            data = data.get(key)
        elif isinstance(data, list) and isinstance(key, int) and 0 <= key < len(data):
            data = data[key]
        else:
            return None
    return data


def _unwrap(annotation: Any) -> Any:
    """Strip ``Annotated`` and ``X | None`` down to the interesting type."""
    while True:
        if isinstance(annotation, str):
            return None
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
            continue
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) == 1:
                annotation = members[0]
                continue
        return annotation


def _train_fix(given: str) -> str:
    """What to write instead of a ``train:`` string that names no function."""
    if given.endswith(".py") and " " not in given.strip():
        return f'a script runs as train: {{command: "python {given}"}}'
    if " " in given.strip():
        return f'a script runs as train: {{command: "{given}"}}'
    module, _, function = given.rpartition(".")
    if ":" not in given and module and function.isidentifier():
        return f"did you mean '{module}:{function}'?"
    return "name the training function like mypkg.train:train"
