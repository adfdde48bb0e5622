"""Config validation: unknown keys with suggestions, types, whole-config rules, messages."""

from __future__ import annotations

import warnings

import optuna
import pytest
import yaml

from hpsearch.config import ConfigKeyWarning, RunConfig, load_config
from hpsearch.errors import ConfigError
from tests.conftest import BASE_CONFIG, ConfigWriter


def _error(write_config: ConfigWriter, update: dict[str, object] | str) -> ConfigError:
    path = write_config(update)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)  # one line
    return info.value


def test_base_config_loads(config: RunConfig) -> None:
    assert config.study.name == "test-study"
    assert config.study.storage == "sqlite:///mlruns/optuna.db"
    assert config.tracking.uri == "sqlite:///mlruns/mlflow.db"
    assert [o.metric for o in config.objective_list] == ["score"]
    assert config.experiment_name == "test-study"
    assert config.search_space.constants() == {"steps": 3}


@pytest.mark.parametrize(
    ("update", "key", "suggestion"),
    [
        ({"study": {"n_trial": 3}}, "study.n_trial", "n_trials"),
        ({"studdy": {"name": "x"}}, "studdy", "study"),
        ({"execution": {"max_concurent": 2}}, "execution.max_concurent", "max_concurrent"),
        ({"space": {"x": {"lwo": 0.0, "low": None}}}, "space.x.lwo", "low"),
        ({"study": {"sampler": {"typ": "tpe"}}}, "study.sampler.typ", "type"),
    ],
)
def test_unknown_keys_name_the_closest_valid_key(
    write_config: ConfigWriter, update: dict[str, object], key: str, suggestion: str
) -> None:
    error = _error(write_config, update)
    assert error.key == key
    assert f"did you mean '{suggestion}'" in str(error)
    assert error.line is not None


@pytest.mark.parametrize(
    ("update", "key", "fix"),
    [
        ({"n_trials": 10}, "n_trials", "it belongs under study: write study: {n_trials: 10}"),
        (
            {"max_concurrent": 4},
            "max_concurrent",
            "it belongs under execution: write execution: {max_concurrent: 4}",
        ),
        ({"seed": 1}, "seed", "it belongs under study.sampler: write study: {sampler: {seed: 1}}"),
        (
            {"pruner": {"type": "median"}},
            "pruner",
            "it belongs under study: write study: {pruner: {type: median}}",
        ),
        ({"sampler": "tpe"}, "sampler", "it belongs under study: write study: {sampler: ...}"),
        (
            {"packing": {"members": 4}},
            "packing.members",
            "it belongs under fusion: write fusion: {members: 4}",
        ),
        ({"mode": "auto"}, "mode", "it is a key of packing and fusion: write it under the one"),
    ],
)
def test_a_key_written_outside_its_section_is_told_where_it_belongs(
    write_config: ConfigWriter, update: dict[str, object], key: str, fix: str
) -> None:
    error = _error(write_config, update)
    assert error.key == key
    assert f"unknown key '{key.rpartition('.')[2]}' here; {fix}" in str(error)
    assert error.line is not None


@pytest.mark.parametrize(
    ("param", "key", "fix"),
    [
        ({"type": "float", "min": 0.0, "high": 1.0}, "space.x.min", "did you mean 'low'?"),
        ({"type": "float", "low": 0.0, "max": 1.0}, "space.x.max", "did you mean 'high'?"),
        ({"type": "categorical", "values": [1, 2]}, "space.x.values", "did you mean 'choices'?"),
        (
            {"type": "loguniform", "low": 1e-4, "high": 0.1},
            "space.x",
            "write {type: float, low: .., high: .., log: true}",
        ),
        (
            {"type": "choice", "choices": [1, 2]},
            "space.x",
            "write {type: categorical, choices: [...]}, or the list of choices alone",
        ),
        (
            {"distribution": "uniform", "min": 0.0, "max": 1.0},
            "space.x",
            "hpsearch convert FILE turns a W&B sweep or an NNI space into a config",
        ),
        (  # W&B's scale is its distribution's: the log is kept
            {"distribution": "log_uniform_values", "min": 1e-4, "max": 0.1},
            "space.x",
            "write {type: float, low: 0.0001, high: 0.1, log: true}; hpsearch convert FILE "
            "turns a W&B sweep or an NNI space into a config",
        ),
        (  # its bounds are exponents: convert's to say
            {"distribution": "log_uniform", "min": -9, "max": -2},
            "space.x",
            "write {type: float|int|categorical, ...}, a list of choices, or a plain "
            "constant; hpsearch convert FILE turns a W&B sweep or an NNI space into a config",
        ),
    ],
)
def test_a_range_in_another_tools_words_is_told_this_configs(
    write_config: ConfigWriter, param: dict[str, object], key: str, fix: str
) -> None:
    # W&B sweeps write min/max/values and distribution:, NNI _type:, Ray Tune loguniform.
    error = _error(write_config, {"space": {"x": None, "y": param}})  # x: the base's, deleted
    key = key.replace("space.x", "space.y")
    assert any(f" {key}: " in line and line.endswith(fix) for line in error.every_problem())


@pytest.mark.parametrize(
    ("text", "meant"),
    [
        ("tune.loguniform(1e-4, 1e-1)", "{type: float, low: 0.0001, high: 0.1, log: true}"),
        ("tune.randint(1, 10)", "{type: int, low: 1, high: 9}"),  # Tune leaves 10 out
        ("tune.qrandint(8, 64, 8)", "{type: int, low: 8, high: 64, step: 8}"),
        ("tune.choice(['relu', 'gelu'])", '["relu", "gelu"]'),
        ("hp.loguniform('lr', -9, -2)", "{type: float, low: 0.0001234, high: 0.1353, log: true}"),
        (
            "tune.randn(0, 1)",
            "{type: float, low: .., high: ..} (hpsearch searches no normal distribution)",
        ),
    ],
)
def test_a_distribution_written_as_call_text_is_refused_with_its_entry(
    write_config: ConfigWriter, text: str, meant: str
) -> None:
    # A Ray Tune (or hyperopt) space pasted into YAML: a string, which passed as a constant.
    error = _error(write_config, {"space": {"y": text}})
    assert str(error).endswith(f"'y' is the text {text!r}, not a range; write y: {meant}")
    # Text that only looks like a call is a constant still, as any string is.
    loaded = load_config(write_config({"space": {"y": "resnet(18)"}}))
    assert loaded.search_space.constants()["y"] == "resnet(18)"


def test_a_sampler_or_pruner_named_alone_is_told_the_mapping_to_write(
    write_config: ConfigWriter,
) -> None:
    error = _error(write_config, {"study": {"sampler": "tpe", "pruner": "median"}})
    said = error.every_problem()
    assert any(
        line.endswith(
            "study.sampler: expected a mapping (key: value lines), got the "
            "string 'tpe'; write {type: tpe}"
        )
        for line in said
    )
    assert any(line.endswith("; write {type: median}") for line in said)


def test_a_samplers_or_pruners_own_argument_beside_its_type_is_told_to_go_under_options(
    write_config: ConfigWriter,
) -> None:
    # As Optuna's MedianPruner(n_startup_trials=5) and TPESampler(multivariate=True) take them.
    update = {
        "sampler": {"type": "tpe", "multivariate": True, "optons": {}},
        "pruner": {"type": "median", "n_startup_trials": 5},
    }
    said = _error(write_config, {"study": update}).every_problem()
    assert sorted(line.split(": ", 1)[1] for line in said) == [
        "study.pruner.n_startup_trials: unknown key 'n_startup_trials'; the pruner's own "
        "arguments go under options: write options: {n_startup_trials: 5}",
        "study.sampler.multivariate: unknown key 'multivariate'; the sampler's own "
        "arguments go under options: write options: {multivariate: true}",
        "study.sampler.optons: unknown key 'optons'; did you mean 'options'?",
    ]


def test_misspelt_value_suggests_the_allowed_one(write_config: ConfigWriter) -> None:
    error = _error(write_config, {"objective": {"direction": "maximise"}})
    assert error.key == "objective.direction"
    assert "did you mean 'maximize'" in str(error)


def test_a_ray_tune_scheduler_named_as_the_pruner_is_told_this_configs_name(
    write_config: ConfigWriter,
) -> None:
    for theirs, ours in [("asha", "successive_halving"), ("MedianStoppingRule", "median")]:
        error = _error(write_config, {"study": {"pruner": {"type": theirs}}})
        assert error.key == "study.pruner.type"
        assert (
            error.fix == f"Ray Tune's {theirs} is this config's pruner {ours}: write type: {ours}"
        )


def test_ray_tunes_own_keys_are_told_this_configs(write_config: ConfigWriter) -> None:
    # TuneConfig(mode="min", num_samples=...), tune.with_resources: what Tune users write.
    error = _error(write_config, {"objective": {"direction": None, "mode": "min"}})
    assert (error.key, error.problem) == ("objective.mode", "unknown key 'mode' (a Ray Tune word)")
    assert error.fix == "write direction: minimize (Tune's min) or maximize (max)"
    error = _error(write_config, {"study": {"num_samples": 8}})
    assert (error.key, error.fix) == ("study.num_samples", "write n_trials: N")
    error = _error(write_config, {"execution": {"resources_per_trial": {"gpu": 0.5}}})
    assert error.fix.startswith("write cpus_per_trial: N for its CPUs; its GPU share is packing's")
    multi = {"metric": "score", "mode": "max"}
    error = _error(write_config, {"objective": None, "objectives": [multi]})
    assert error.key == "objectives.0.mode"
    assert error.fix.startswith("write direction:")


def test_another_tools_file_given_as_a_config_is_told_to_convert(
    write_config: ConfigWriter,
) -> None:
    sweep = "method: bayes\nmetric: {name: loss, goal: minimize}\nparameters: {lr: {min: 0.1}}\n"
    nni = "searchSpaceFile: s.json\ntrialCommand: python t.py\ntuner: {name: TPE}\n"
    for text, tool in [(sweep, "a W&B sweep"), (nni, "an NNI experiment")]:
        error = _error(write_config, text)
        path = write_config(text)
        assert (error.key, error.problem) == ("", f"this is {tool}, not an hpsearch config")
        assert error.fix == f"hpsearch convert {path} -o config.yaml writes the config it describes"
    # A config with one stray key of theirs is a config: that key is named.
    assert _error(write_config, {"method": "bayes"}).key == "method"
    # A W&B metric's words in the objective are told this config's.
    error = _error(write_config, {"objective": {"direction": None, "goal": "minimize"}})
    assert (error.problem, error.fix) == (
        "unknown key 'goal' (a W&B word)",
        "write direction: minimize or maximize, as the goal was",
    )


def test_misspelt_param_type_suggests(write_config: ConfigWriter) -> None:
    error = _error(write_config, {"space": {"x": {"type": "flaot"}}})
    assert error.key == "space.x"
    assert "did you mean 'float'" in str(error)


def test_quoted_number_is_a_type_error(write_config: ConfigWriter) -> None:
    error = _error(write_config, {"study": {"n_trials": "20"}})
    assert error.key == "study.n_trials"
    assert "without quotes" in str(error)


def test_float_bounds_on_an_int_param_are_rejected(write_config: ConfigWriter) -> None:
    error = _error(write_config, {"space": {"x": {"type": "int", "low": 1.5, "high": 4}}})
    assert error.key == "space.x.low"


def test_an_empty_metric_is_told_what_to_name(write_config: ConfigWriter) -> None:
    error = _error(write_config, {"objective": {"metric": "", "direction": "maximize"}})
    assert error.key == "objective.metric"
    assert str(error).endswith(
        "objective.metric: is empty; write the name of a metric the training function "
        "reports, e.g. val_accuracy"
    )
    error = _error(write_config, {"study": {"sampler": {"type": ""}}})
    assert str(error).endswith("study.sampler.type: is empty; write a sampler's type, e.g. tpe")


def test_one_of_objective_or_objectives(write_config: ConfigWriter) -> None:
    error = _error(write_config, {"objectives": [{"metric": "speed", "direction": "maximize"}]})
    assert "exactly one of 'objective'" in str(error)


def test_a_required_key_left_out_is_told_what_it_takes(write_config: ConfigWriter) -> None:
    head = "study: {name: s, n_trials: 2}\n"
    error = _error(write_config, head + "train: m:f\nobjective: {metric: acc}\n")
    assert str(error).endswith(
        "objective.direction: required key is missing; add it: direction: maximize or minimize"
    )
    error = _error(write_config, head + "objective: {metric: acc, direction: maximize}\n")
    assert "train: required key is missing; add what each trial runs: train: " in str(error)
    assert "{optuna: mypkg:objective}" in str(error)


def test_several_objectives_load(write_config: ConfigWriter) -> None:
    path = write_config(
        {
            "objective": None,
            "objectives": [
                {"metric": "score", "direction": "maximize"},
                {"metric": "speed", "direction": "maximize"},
            ],
        }
    )
    assert [o.metric for o in load_config(path).objective_list] == ["score", "speed"]


def test_search_needs_an_end(write_config: ConfigWriter) -> None:
    error = _error(write_config, {"study": {"n_trials": None}})
    assert "n_trials or study.timeout" in str(error)


def test_a_timeout_grace_needs_a_timeout(write_config: ConfigWriter) -> None:
    error = _error(write_config, {"study": {"timeout_grace": "2m"}})
    assert "study.timeout_grace is set without study.timeout" in str(error)
    study = load_config(write_config({"study": {"timeout": "1h", "timeout_grace": "2m"}})).study
    assert (study.timeout, study.timeout_grace) == (3600.0, 120.0)


def test_nothing_to_search_is_an_error(write_config: ConfigWriter) -> None:
    error = _error(write_config, {"space": {"x": 3}})
    assert error.key == "space"
    assert "nothing to search" in str(error)


def test_train_must_name_module_and_function(write_config: ConfigWriter) -> None:
    error = _error(write_config, {"train": "tests.train_functions.quick"})
    assert "package.module:function" in str(error)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90.0), ("15m", 900.0), ("1h30m", 5400.0), (600, 600.0)]
)
def test_timeout_accepts_durations(
    write_config: ConfigWriter, text: object, seconds: float
) -> None:
    assert load_config(write_config({"study": {"timeout": text}})).study.timeout == seconds


def test_bad_duration_is_explained(write_config: ConfigWriter) -> None:
    error = _error(write_config, {"study": {"timeout": "soon"}})
    assert error.key == "study.timeout"
    assert "15m" in str(error)


def test_a_zero_or_false_where_null_means_none_says_null(write_config: ConfigWriter) -> None:
    # 0 and off are "no limit" in other tools; here a limit that can be none is null.
    for given in (0, False):
        error = _error(write_config, {"execution": {"hang_timeout": given}})
        assert error.key == "execution.hang_timeout"
        assert error.fix.endswith("null for none"), error.fix
    assert _error(write_config, {"execution": {"trial_timeout": -1}}).fix == "change the value"
    # A setting that cannot be none is not told to be null.
    assert "null" not in _error(write_config, {"execution": {"cpus_per_trial": 0}}).fix


def test_off_written_bare_is_the_option_off(write_config: ConfigWriter) -> None:
    # YAML 1.1, which PyYAML reads, takes a bare off for false: these keys' option "off"
    # was refused as "'False' is not allowed; use one of: auto, off, fixed".
    text = yaml.safe_dump(BASE_CONFIG, sort_keys=False) + (
        "packing: {mode: off, mps: off}\nfusion: {mode: off}\ntelemetry: {backend: off}\n"
    )
    config = load_config(write_config(text))
    assert (config.packing.mode, config.packing.mps) == ("off", "off")
    assert (config.fusion.mode, config.telemetry.backend) == ("off", "off")
    # A section written as its mode alone is told the mapping it takes.
    alone = yaml.safe_dump(BASE_CONFIG, sort_keys=False) + "packing: off\n"
    assert _error(write_config, alone).fix == "write packing: {mode: off}"
    assert _error(write_config, {"fusion": "auto"}).fix == "write fusion: {mode: auto}"
    # A false anywhere else is still a bool, as YAML has it.
    assert config.tracking.figures is False
    # And a false where a section takes no "off" is still refused, with its options.
    error = _error(write_config, {"study": {"sampler": {"type": False}}})
    assert error.key == "study.sampler.type"
    # A bare on (or yes), YAML's true, is said as written, not as 'True'.
    on = _error(write_config, yaml.safe_dump(BASE_CONFIG) + "packing: {mps: on}\n")
    assert (on.key, on.problem, on.fix) == (
        "packing.mps",
        "a YAML true (on, yes, true) is not allowed",
        "use one of: auto, off",
    )


def test_empty_file(write_config: ConfigWriter) -> None:
    assert "empty" in str(_error(write_config, ""))


def test_top_level_must_be_a_mapping(write_config: ConfigWriter) -> None:
    assert "mapping" in str(_error(write_config, "- a\n- b\n"))


def test_overrides_keep_the_source(config: RunConfig) -> None:
    changed = config.with_overrides(n_trials=9, timeout=30.0, address="127.0.0.1:1")
    assert changed.study.n_trials == 9
    assert changed.study.timeout == 30.0
    assert changed.execution.address == "127.0.0.1:1"
    assert changed.source == config.source
    assert config.study.n_trials == 4


def test_until_needs_exactly_one_level(write_config: ConfigWriter) -> None:
    error = _error(
        write_config,
        {
            "objective": {
                "metric": "seconds",
                "direction": "minimize",
                "until": {"metric": "score"},
            }
        },
    )
    assert "at_least or at_most" in str(error)


def test_oom_grows_memory_must_name_searched_parameters(write_config: ConfigWriter) -> None:
    error = _error(write_config, {"oom": {"grows_memory": ["batchsize"]}})
    assert "oom.grows_memory names ['batchsize'], which are not in space" in str(error)
    error = _error(write_config, {"oom": {"action": "halve"}})
    assert "oom.action" in str(error)
    # Halving a batch the space does not have would prune every trial that runs out.
    error = _error(write_config, {"oom": {"action": "retry_smaller_batch"}})
    assert str(error).endswith(
        "oom.action: retry_smaller_batch halves the parameter batch_size, which the space "
        "does not have; add batch_size to space (each trial's micro-batch), or write "
        "action: prune"
    )
    with_batch = {"space": {"x": {"type": "float", "low": 0, "high": 1}, "batch_size": 64}}
    load_config(write_config({**with_batch, "oom": {"action": "retry_smaller_batch"}}))


def test_packing_defaults_to_auto_and_a_fixed_count_of_zero_runs_trials_on_cpu(
    write_config: ConfigWriter,
) -> None:
    packing = load_config(write_config({})).packing_in_effect
    assert packing is not None
    assert packing.mode == "auto"
    fixed = {"packing": {"mode": "fixed", "trials_per_gpu": 3}}
    in_effect = load_config(write_config(fixed)).packing_in_effect
    assert in_effect is not None
    assert (in_effect.mode, in_effect.trials_per_gpu) == ("fixed", 3)
    cpu_only = {"packing": {"mode": "fixed", "trials_per_gpu": 0}}
    assert load_config(write_config(cpu_only)).packing_in_effect is None
    # A mode written out is a choice; the count beside it waits for a switch back to fixed.
    switched = {"packing": {"mode": "auto", "trials_per_gpu": 3}}
    assert load_config(write_config(switched)).packing.mode == "auto"


def test_packings_times_are_written_as_the_configs_other_durations_are(
    write_config: ConfigWriter,
) -> None:
    written = {"packing": {"probe_seconds": "10s", "cooldown_seconds": "2m"}}
    packing = load_config(write_config(written)).packing
    assert (packing.probe_seconds, packing.cooldown_seconds) == (10.0, 120.0)
    assert (
        load_config(write_config({"packing": {"cooldown_seconds": 0}})).packing.cooldown_seconds
        == 0
    )
    error = _error(write_config, {"packing": {"cooldown_seconds": "30 s"}})
    assert error.key == "packing.cooldown_seconds"
    assert "cannot read '30 s' as a duration" in str(error)


def test_a_knobs_old_spelling_is_one_line_naming_the_new_one(
    write_config: ConfigWriter,
) -> None:
    error = _error(write_config, {"execution": {"trials_per_gpu": 2}})
    assert str(error).endswith(
        "execution.trials_per_gpu: this key is now packing.trials_per_gpu; write packing: "
        "{mode: fixed, trials_per_gpu: N} (0: trials on CPU only)"
    )


@pytest.mark.parametrize(
    ("update", "message"),
    [
        (
            {"packing": {"mode": "auto", "trials_per_gpu": 0}},
            "trials_per_gpu: 0 (trials on CPU only) needs mode: fixed, not auto",
        ),
        (
            {"packing": {"trials_per_gpu": 4}},
            "packing: trials_per_gpu is the count of mode: fixed, and mode is auto by "
            "default; write packing: {mode: fixed, trials_per_gpu: 4}, or "
            "max_trials_per_gpu: 4 to cap auto",
        ),
        (
            {"fusion": {"members": 4, "train": "m:f"}},
            "fusion: members is the count of mode: fixed, and fusion is off by default; write "
            "fusion: {mode: fixed, members: 4}, or {mode: auto, max_members: 4}",
        ),
        (
            {"packing": {"target_util": 90, "saturation_util": 80}},
            "saturation_util (80) must not be below target_util (90)",
        ),
        ({"packing": {"mode": "dynamic"}}, "packing.mode"),
        ({"packing": {"max_trials_per_gpu": 0}}, "packing.max_trials_per_gpu"),
        ({"packing": {"mps": "on"}}, "packing.mps"),
        (
            {"packing": {"memory_headroom": 1.5}},
            "packing.memory_headroom: input should be less than 0.9 (got 1.5); change the value",
        ),
        (
            {"packing": {"target_util": 150}},
            "packing.target_util: input should be less than or equal to 100 (got 150)",
        ),
    ],
)
def test_packing_mistakes_are_one_line(
    write_config: ConfigWriter, update: dict[str, object], message: str
) -> None:
    assert message in str(_error(write_config, update))


def test_a_training_script_is_a_command_whose_placeholders_are_parameters(
    write_config: ConfigWriter,
) -> None:
    loaded = load_config(
        write_config({"train": {"command": "python train.py --x {x} --steps {steps}"}})
    )
    assert loaded.command is not None
    assert loaded.command.metrics == "stdout-jsonl"
    assert loaded.train_target == ""
    error = _error(write_config, {"train": {"command": "python train.py --lr {lr}"}})
    assert "train.command names {lr}, which is not in space" in str(error)
    error = _error(write_config, {"train": {"comand": "python train.py"}})
    assert error.key == "train.comand"
    assert "did you mean 'command'?" in str(error)


@pytest.mark.parametrize(
    ("train", "fix"),
    [
        ("tests.train_functions:quick", "report it with ctx.report(step, val_loss=...)"),
        ({"tune": "tests.tune_trainables:with_data"}, 'tune.report({"val_loss": ...})'),
        ({"command": "python t.py"}, "or as val_loss: ... (on stdout or stderr: read when the"),
        ({"command": "python t.py"}, '{"step": 0, "val_loss": ...}'),
        (
            {"command": "python t.py", "metrics": "file-jsonl"},
            "to the file HPSEARCH_METRICS_FILE names (metrics.jsonl in the trial's own folder, "
            "not where the script runs; a script that takes the path as a flag: --flag "
            "$HPSEARCH_METRICS_FILE)",
        ),
        (
            {"command": "python t.py", "metrics": "file-jsonl", "metrics_file": "/data/m.jsonl"},
            "HPSEARCH_METRICS_FILE names (/data/m.jsonl;",
        ),
        ({"command": "python t.py", "metrics": {"scalars": True}}, "as val_loss=..."),
    ],
)
def test_a_trial_that_never_reported_the_metric_is_told_how_its_form_reports(
    write_config: ConfigWriter, train: object, fix: str
) -> None:
    loaded = load_config(write_config({"train": train}))
    assert fix in loaded.how_to_report("val_loss")


def test_a_command_that_names_a_branchs_parameter_is_refused_naming_the_branches_without_it(
    write_config: ConfigWriter,
) -> None:
    # The Adam trials would run `--momentum {momentum}` with no momentum, and fail.
    space = {
        "x": {"type": "float", "low": 0.0, "high": 1.0},
        "optimizer": {
            "sgd": {"momentum": {"type": "float", "low": 0.0, "high": 0.9}},
            "adam": None,
            "rmsprop": None,
        },
    }
    command = {"command": "python train.py --x {x} --momentum {momentum}"}
    error = _error(write_config, {"space": space, "train": command})
    assert str(error).endswith(
        "train.command names {momentum}, which only trials with optimizer sgd have (trials "
        "with optimizer adam or rmsprop have none); give the parameters with {args}, an "
        "argument of its own (one --name=value per parameter a trial has)"
    )
    # What the error suggests is accepted: every trial gets the parameters it has.
    loaded = load_config(
        write_config({"space": space, "train": {"command": "python train.py {args}"}})
    )
    assert loaded.command is not None


def test_a_branch_of_the_space_expands_to_conditions(write_config: ConfigWriter) -> None:
    loaded = load_config(
        write_config(
            {
                "space": {
                    "optimizer": {
                        "sgd": {"momentum": {"type": "float", "low": 0.0, "high": 0.9}},
                        "adam": {"beta1": [0.9, 0.99]},
                        "plain": None,
                    }
                }
            }
        )
    )
    space = loaded.space
    assert list(space)[-3:] == ["optimizer", "momentum", "beta1"]
    assert space["momentum"].when == {"optimizer": "sgd"}
    assert space["beta1"].when == {"optimizer": "adam"}


def test_a_tune_grid_search_pasted_into_the_file_is_its_choices(
    write_config: ConfigWriter,
) -> None:
    loaded = load_config(write_config({"space": {"seed": {"grid_search": [0, 1, 2]}}}))
    assert loaded.space["seed"].model_dump(exclude_defaults=True) == {
        "type": "categorical",
        "choices": [0, 1, 2],
    }


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"type": "float", "low": 0, "high": 1, "when": {"act": "tanh"}}, "act is never 'tanh'"),
        ({"type": "float", "low": 0, "high": 1, "when": {"later": 1}}, "'later', which is later"),
        ({"type": "float", "low": 0, "high": 1, "when": {"nope": 1}}, "'nope', which is not in"),
    ],
)
def test_a_condition_names_an_earlier_parameter_and_a_value_it_can_take(
    write_config: ConfigWriter, entry: dict[str, object], words: str
) -> None:
    error = _error(
        write_config, {"space": {"act": ["relu", "gelu"], "cond": entry, "later": [1, 2]}}
    )
    assert error.key == "space"
    assert words in str(error)


def test_the_tracking_writer_is_a_process_for_a_database_or_a_long_search_never_a_server(
    write_config: ConfigWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    def in_process(tracking: dict[str, str], n_trials: int = 100) -> bool:
        config = load_config(write_config({"tracking": tracking, "study": {"n_trials": n_trials}}))
        return config.tracking.writes_in_process(config.study.n_trials)

    assert not in_process({})  # the default SQLite file: the driver writes
    assert in_process({"uri": "postgresql+psycopg://u@127.0.0.1:5432/runs"})
    assert in_process({"uri": "mysql://u@db/runs"})
    assert not in_process({"uri": "http://127.0.0.1:5000"})
    assert in_process({"writer": "process"})
    assert not in_process({"uri": "postgresql://u@db/runs", "writer": "driver"})
    # A long search on SQLite: a process, where a core is left for it.
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert not in_process({}, n_trials=499)
    assert in_process({}, n_trials=500)
    assert not in_process({"writer": "driver"}, n_trials=10_000)
    assert not in_process({"uri": "http://127.0.0.1:5000"}, n_trials=10_000)
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert not in_process({}, n_trials=10_000)
    error = _error(write_config, {"tracking": {"uri": "http://host:5000", "writer": "process"}})
    assert "tracking: writer: process writes a database store, not a tracking server" in str(error)


def test_cpus_per_trial_over_the_local_rays_num_cpus_is_refused_naming_both(
    write_config: ConfigWriter,
) -> None:
    error = _error(write_config, {"execution": {"num_cpus": 2, "cpus_per_trial": 3}})
    assert error.key == "execution"
    assert "cpus_per_trial: a trial asks 3 CPUs, but num_cpus gives the local Ray 2" in str(error)
    assert str(error).endswith("lower cpus_per_trial to at most 2, or raise num_cpus")
    load_config(write_config({"execution": {"num_cpus": 2, "cpus_per_trial": 2}}))
    # num_cpus is the local Ray's: a cluster joined by address has its own.
    load_config(
        write_config({"execution": {"num_cpus": 2, "cpus_per_trial": 3, "address": "auto"}})
    )


def test_a_trial_to_enqueue_outside_the_space_is_refused_in_one_line(
    write_config: ConfigWriter,
) -> None:
    error = _error(write_config, {"study": {"enqueue": [{"x": 0.5}, {"x": 2.0}]}})
    assert "study.enqueue[1]: x: 2.0 is not a number in [0.0, 1.0]; give one that is" in str(error)
    assert load_config(write_config({"study": {"enqueue": [{"x": 0.5}]}})).enqueued == [{"x": 0.5}]


def test_a_search_needs_an_end_which_a_grid_is(write_config: ConfigWriter) -> None:
    error = _error(write_config, {"study": {"n_trials": None}})
    assert "the search has no end; set study.n_trials or study.timeout" in str(error)
    # As Study.optimize with a GridSampler: the search ends once each point has run.
    grid = {"study": {"n_trials": None, "sampler": {"type": "grid"}}, "space": {"x": [0.1, 0.2]}}
    assert load_config(write_config(grid)).study.n_trials is None


@pytest.mark.parametrize(
    ("update", "fix"),
    [
        ({"objective": {"metric": "score", "direction": "MAXIMIZE"}}, "did you mean 'maximize'?"),
        ({"objective": {"metric": "score", "direction": "min"}}, "did you mean 'minimize'?"),
        ({"study": {"pruner": {"type": "Median"}}}, "did you mean 'median'?"),
    ],
)
def test_a_word_in_other_capitals_is_answered_with_the_word(
    write_config: ConfigWriter, update: dict[str, object], fix: str
) -> None:
    assert _error(write_config, update).fix == fix


def test_a_runtime_env_field_ray_does_not_know_is_said_at_its_line(
    write_config: ConfigWriter,
) -> None:
    # Ray gives an unknown name to a plugin of that name, and without one ignores it.
    path = write_config({"execution": {"runtime_env": {"env_var": {"A": "1"}}}})
    with pytest.warns(ConfigKeyWarning, match="did you mean 'env_vars'") as said:
        load_config(path)
    [warning] = said
    assert warning.filename == str(path)
    assert path.read_text().splitlines()[warning.lineno - 1].strip().startswith("env_var")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_config(write_config({"execution": {"runtime_env": {"env_vars": {"A": "1"}}}}))


def test_a_grid_for_an_optuna_objective_names_its_points_where_the_space_has_none(
    write_config: ConfigWriter,
) -> None:
    # Its suggest_* calls are known only as it runs: a grid of the empty space failed
    # each trial with Optuna's "The parameter name, x, is not found in the given grid".
    objective: dict[str, object] = {
        "train": {"optuna": "tests.optuna_objectives:objective"},
        "space": None,
    }
    grid: dict[str, object] = {"study": {"n_trials": 2, "sampler": {"type": "grid"}}, **objective}
    error = _error(write_config, grid)
    assert "an Optuna objective's suggest_* calls are known only as it runs" in str(error)
    assert "options: {search_space: {x: [0.1, 0.5, 0.9]}}" in str(error)
    points = {"type": "grid", "options": {"search_space": {"x": [0.1, 0.9]}}}
    load_config(write_config({**grid, "study": {"n_trials": 2, "sampler": points}}))


def test_an_optuna_objectives_values_are_named_value_where_the_config_names_none(
    write_config: ConfigWriter,
) -> None:
    # As create_study(direction="maximize") takes it; Optuna's MLflowCallback names so.
    head = "study: {name: s, n_trials: 3}\ntrain: {optuna: tests.optuna_objectives:objective}\n"
    one = load_config(write_config(head + "objective: {direction: maximize}\n"))
    assert [(o.metric, o.direction) for o in one.objective_list] == [("value", "maximize")]
    several = load_config(
        write_config(head + "objectives: [{direction: maximize}, {direction: minimize}]\n")
    )
    assert [o.metric for o in several.objective_list] == ["value_0", "value_1"]
    named = load_config(write_config(head + "objective: {metric: acc, direction: maximize}\n"))
    assert [o.metric for o in named.objective_list] == ["acc"]

    error = _error(write_config, {"objective": {"metric": None, "direction": "maximize"}})
    assert "objective.metric: required key is missing" in str(error)  # a function: named


def test_a_dict_is_checked_as_a_file_is_and_its_errors_name_it_dict() -> None:
    import hpsearch

    sections: dict[str, object] = {
        "study": {"name": "s", "n_trials": 3},
        "objective": {"direction": "maximize"},
        "train": "tests.train_functions:quick",
        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
    }
    with pytest.raises(ConfigError) as info:
        hpsearch.run(sections)  # refused before anything starts
    assert str(info.value) == "<dict>: objective.metric: required key is missing; add it"
    sections["objective"] = {"metric": "score", "direction": "maximize"}
    assert load_config(sections).objective_list[0].metric == "score"


@pytest.mark.parametrize(
    ("train", "said"),
    [
        (
            {"command": "x", "metrics": {"patterns": 5}},
            ["train.metrics.patterns: expected a list, got 5; write a list"],
        ),
        (
            {"command": "x", "metrics": {"scalar": True}},
            ["train.metrics.scalar: unknown key 'scalar'; did you mean 'scalars'?"],
        ),
        (
            {"command": "x", "metrics": "stdout-json"},
            ["train.metrics: 'stdout-json' is not allowed; did you mean 'stdout-jsonl'?"],
        ),
        (
            {"command": ["python", 5]},
            ["train.command.1: expected a string, got 5; write a string"],
        ),
        ({"command": 5}, ["train.command: expected a string, got 5; write a string"]),
    ],
)
def test_a_value_that_may_take_two_forms_is_judged_by_the_form_it_has(
    write_config: ConfigWriter, train: dict[str, object], said: list[str]
) -> None:
    # train.metrics is a name or a mapping, train.command a string or a list: pydantic
    # reports each form's errors, under its own names for them ("literal[...]", "str").
    error = _error(write_config, {"train": train})
    assert [f"{e.key}: {e.problem}; {e.fix}" for e in (error, *error.others)] == said


@pytest.mark.parametrize(
    ("update", "said"),
    [
        (
            {"objective": "val_accuracy"},
            "objective: expected a mapping (key: value lines), got the string 'val_accuracy'; "
            "write {metric: val_accuracy, direction: maximize} (or minimize)",
        ),
        (  # several, under the one objective's key (as Optuna lists directions=[...])
            {"objective": [{"metric": "a", "direction": "maximize"}] * 2},
            "objective: expected a mapping (key: value lines), got a list; several "
            "objectives are a list under objectives: (objectives: [{metric: A, direction: "
            "maximize}, {metric: B, direction: minimize}]), or write one as objective: "
            "{metric: A, direction: maximize}",
        ),
        (
            {"objective": None, "objectives": {"metric": "a", "direction": "maximize"}},
            "objectives: expected a list, got a mapping; write a list, objectives: [{metric: "
            "A, direction: maximize}, {metric: B, direction: minimize}], or one as objective: "
            "{metric: A, direction: maximize}",
        ),
        # A range as W&B writes one (min/max, values, value), or without its type.
        ({"space": {"lr": {"min": 0.1, "max": 1}}}, "write {type: float, low: 0.1, high: 1}"),
        ({"space": {"n": {"low": 1, "high": 8}}}, "write {type: int, low: 1, high: 8}"),
        (
            {"space": {"lr": {"low": 1e-4, "high": 0.1, "log": True}}},
            "write {type: float, low: 0.0001, high: 0.1, log: true}",
        ),
        ({"space": {"n": {"values": [1, 2]}}}, "write the list of choices alone: [1, 2]"),
        ({"space": {"n": {"value": 3}}}, "write the constant alone: 3"),
    ],
)
def test_a_section_in_the_wrong_form_is_told_the_right_one_from_what_it_holds(
    write_config: ConfigWriter, update: dict[str, object], said: str
) -> None:
    error = _error(write_config, update)
    assert f"{error.key}: {error.problem}; {error.fix}".endswith(said)


class OwnSampler(optuna.samplers.RandomSampler):
    """A sampler of the user's own (a notebook's, say)."""


def test_an_optuna_sampler_or_pruner_object_in_a_dict_is_told_to_be_named() -> None:
    def refusals(sampler: object, pruner: object) -> list[str]:
        sections = {
            "study": {"name": "s", "n_trials": 3, "sampler": sampler, "pruner": pruner},
            "objective": {"metric": "score", "direction": "maximize"},
            "train": "tests.train_functions:quick",
            "space": {"x": [1, 2]},
        }
        with pytest.raises(ConfigError) as info:
            load_config(sections)
        return [f"{e.key}: {e.problem}; {e.fix}" for e in (info.value, *info.value.others)]

    assert refusals(optuna.samplers.TPESampler(seed=1), optuna.pruners.MedianPruner()) == [
        "study.sampler: an Optuna TPESampler object cannot be given here; name it, its "
        "arguments as options: {'type': 'optuna.samplers.TPESampler', 'seed': N, 'options': "
        "{...}} (or a short name: 'tpe', 'random', 'gp', ...)",
        "study.pruner: an Optuna MedianPruner object cannot be given here; name it, its "
        "arguments as options: {'type': 'median', 'options': {...}}",
    ]
    own, nop = refusals(OwnSampler(), optuna.pruners.NopPruner())
    assert "{'type': 'tests.config.test_load:OwnSampler', 'seed': N" in own
    assert nop.endswith("{'type': 'none', 'options': {...}}")
    patient = refusals({"type": "tpe"}, optuna.pruners.PatientPruner(None, patience=2))
    assert patient == [
        "study.pruner: an Optuna PatientPruner object cannot be given here; name it, its "
        "arguments as options: {'type': 'patient', 'options': {...}}"
    ]
    own_pruner = type("OwnPruner", (optuna.pruners.BasePruner,), {"prune": lambda *a: False})
    assert refusals({"type": "tpe"}, own_pruner()) == [
        "study.pruner: an Optuna OwnPruner object cannot be given here; name one "
        "of hpsearch's pruners, {'type': ..., 'options': {...}}: none, median, percentile, "
        "successive_halving, hyperband, threshold, wilcoxon, patient, dominated"
    ]
