"""The hpsearch command without Ray: validate, errors with exit code 2, best, monitor."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from hpsearch import attrs
from hpsearch.cli import main
from hpsearch.config import load_config
from hpsearch.study import open_study
from tests.conftest import ConfigWriter


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_validate_ok(write_config: ConfigWriter) -> None:
    code, out, _ = _invoke("validate", str(write_config()))
    assert code == 0
    assert "ok: study 'test-study', 1 searched parameter(s), 1 constant(s)" in out


def test_validate_repo_configs(repo_configs: Path) -> None:
    for config in sorted(repo_configs.glob("*.yaml")):
        code, out, err = _invoke("validate", str(config))
        assert code == 0, err
        assert "ok:" in out


def test_misspelt_key_exits_2_with_one_line(write_config: ConfigWriter) -> None:
    path = write_config({"study": {"n_trails": 5}})
    code, _, err = _invoke("validate", str(path))
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith(f"error: {path}:")
    assert "study.n_trails: unknown key 'n_trails'; did you mean 'n_trials'?" in err


def test_missing_file_exits_2() -> None:
    code, _, err = _invoke("validate", "nowhere.yaml")
    assert code == 2
    assert "nowhere.yaml: file not found" in err


def test_unimportable_train_exits_2(write_config: ConfigWriter) -> None:
    code, _, err = _invoke("validate", str(write_config({"train": "tests.train_functions:nope"})))
    assert code == 2
    assert "train: module 'tests.train_functions' has no 'nope'" in err


def test_run_with_bad_input_records_nothing(write_config: ConfigWriter, project: Path) -> None:
    code, _, err = _invoke("run", str(write_config({"train": "missing_module:train"})))
    assert code == 2
    assert "cannot import module 'missing_module'" in err
    assert not (project / "mlruns").exists()


def test_run_rejects_bad_override(write_config: ConfigWriter) -> None:
    code, _, err = _invoke("run", str(write_config()), "--n-trials", "0")
    assert code == 2
    assert "--n-trials" in err


def test_best_without_a_study_exits_2(write_config: ConfigWriter) -> None:
    code, _, err = _invoke("best", str(write_config()))
    assert code == 2
    assert "no study storage" in err


def test_best_json(write_config: ConfigWriter) -> None:
    path = write_config()
    handle = open_study(load_config(path))
    study = handle.study
    for x in (0.3, 0.7):
        trial = handle.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
        trial.set_user_attr(attrs.METRICS, {"score": x})
        trial.set_user_attr(attrs.MLFLOW_RUN, f"run-{trial.number}")
        study.tell(trial, x)
    code, out, _ = _invoke("best", str(path), "--json")
    assert code == 0
    payload = json.loads(out)
    assert payload == {
        "study": "test-study",
        "trial_number": 1,
        "params": {"x": study.trials[1].params["x"]},
        "metrics": {"score": 0.7},
        "mlflow_run_id": "run-1",
        "seed": None,  # the trials were told by hand, not run
        "checkpoint_dir": None,
        "values": {"score": 0.7},
    }
    code, out, _ = _invoke("best", str(path))
    assert code == 0
    assert "best trial" in out


@pytest.mark.parametrize("form", [(), ("--json",)])
def test_best_of_a_study_with_no_completed_trial_exits_2_saying_why(
    write_config: ConfigWriter, form: tuple[str, ...]
) -> None:
    path = write_config()
    handle = open_study(load_config(path))
    trial = handle.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
    handle.study.tell(trial, state=optuna.trial.TrialState.FAIL)
    code, out, err = _invoke("best", str(path), *form)
    assert code == 2
    assert out == ""
    assert err.startswith("error: no trial of study 'test-study' completed (1 failed, 0 pruned)")


def test_ui_refuses_a_server_uri(write_config: ConfigWriter) -> None:
    code, _, err = _invoke(
        "ui", str(write_config({"tracking": {"uri": "http://mlflow.example:5000"}}))
    )
    assert code == 2
    assert "has its own UI" in err


@pytest.mark.process
def test_console_script_exit_code(write_config: ConfigWriter) -> None:
    path = write_config({"space": {"x": {"type": "float", "low": 1.0, "high": 0.0}}})
    done = subprocess.run(
        [sys.executable, "-m", "hpsearch", "validate", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "space.x: low (1.0) is greater than high (0.0); swap them" in done.stderr


def test_monitor_seed_trace_flags_the_spike_and_recommends_with_arithmetic(
    project: Path,
) -> None:
    csv = project / "out.csv"
    code, out, err = _invoke(
        "monitor",
        "--simulate",
        "rtx4050-seed004",
        "--duration",
        "1.2",
        "--interval",
        "0.1",
        "--csv",
        str(csv),
    )
    assert code == 0, err
    rows = csv.read_text().splitlines()
    assert rows[0].startswith("time,gpu,name,utilization_pct")
    samples = len(rows) - 1
    assert samples >= 8
    assert f"{samples} samples per GPU written to {csv}" in out
    assert "GPU 0  NVIDIA GeForce RTX 4050 Laptop GPU: very low" in out
    assert "1 reading(s) flagged as measurement errors" in out
    assert "590.0 W is above 1.5 × the 115 W board limit" in out
    assert "input-bound or small batch" in out
    assert "memory headroom allows about 33.1× the batch" in out
    assert re.search(
        r"pack about \d+ trials of this size on this GPU \(by utilisation [\d.]+% each, "
        r"most throughput at \d+",
        out,
    )


@pytest.mark.usefixtures("nvml_missing")
def test_monitor_without_a_gpu_says_so() -> None:
    code, _, err = _invoke("monitor", "--duration", "1")
    assert code == 1
    assert err.count("\n") == 1
    assert "nothing to monitor (try --simulate rtx4050-seed004)" in err


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("bogus", "'bogus' is not a built-in trace"),
        ("constant:utilization_pct=abc", "utilization_pct"),
        ("load:gpus", "'gpus' is not key=value"),
        ("missing.csv", "missing.csv: cannot read the trace"),
    ],
)
def test_monitor_bad_simulate_exits_2(project: Path, spec: str, message: str) -> None:
    code, _, err = _invoke("monitor", "--simulate", spec, "--duration", "1")
    assert code == 2
    assert err.startswith("error: ")
    assert message in err
    assert err.count("\n") == 1


def test_monitor_constant_spec_from_the_command_line(project: Path) -> None:
    code, _, err = _invoke("monitor", "--simulate", "rtx4050-seed004", "--duration", "1 min")
    assert code == 2
    assert "cannot read '1 min' as a duration; write seconds or e.g. '15m', '1h30m'" in err
    code, out, err = _invoke(
        "monitor",
        "--simulate",
        "constant:gpus=2,utilization_pct=95,memory_used_mb=3500",
        "--duration",
        "0.3s",  # a duration as run's --timeout and the config write them
        "--interval",
        "0.1",
    )
    assert code == 0, err
    assert out.count(": saturated") == 2
    assert "GPU 1  Simulated RTX 4050 Laptop GPU" in out


def _three_endings(path: Path) -> None:
    """A study with a complete, a pruned and a failed trial, as a search records them."""
    handle = open_study(load_config(path))
    study = handle.study
    x: dict[str, optuna.distributions.BaseDistribution] = {
        "x": optuna.distributions.FloatDistribution(0.0, 1.0)
    }
    done = handle.ask(x)
    done.set_user_attr(attrs.MLFLOW_RUN, "0123456789abcdef0123456789abcdef")
    done.set_user_attr(attrs.DURATION, 12.5)
    done.set_user_attr(attrs.ASSIGNED, {"gpu_ids": ["0"]})
    study.tell(done, 0.75)
    pruned = handle.ask(x)
    pruned.set_user_attr(attrs.PRUNE_REASON, "score 0.1 at step 3 is below the median 0.5")
    study.tell(pruned, state=optuna.trial.TrialState.PRUNED)
    failed = handle.ask(x)
    failed.set_user_attr(
        attrs.ERROR, 'Traceback (most recent call last):\n  File "train.py"\nValueError: bad width'
    )
    study.tell(failed, state=optuna.trial.TrialState.FAIL)


def test_trials_lists_every_trial_and_filters_by_state(write_config: ConfigWriter) -> None:
    path = write_config()
    _three_endings(path)

    code, out, _ = _invoke("trials", str(path))
    assert code == 0, out
    # Piped, the table is not wrapped: one line per trial, run ids and reasons whole.
    rows = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in out.splitlines()
        if line.startswith("│")
    ]
    # Each trial's parameters, as best shows them (x sampled: its digits vary).
    assert all(re.fullmatch(r"x=0\.\d+|x=0|x=1", row.pop(4)) for row in rows), rows
    assert rows == [
        ["0", "COMPLETE", "12.5s", "0.75", "-", "0", "0123456789abcdef0123456789abcdef"],
        ["1", "PRUNED", "-", "-", "score 0.1 at step 3 is below the median 0.5", "-", "-"],
        ["2", "FAIL", "-", "-", "ValueError: bad width", "-", "-"],
    ]

    code, out, _ = _invoke("trials", str(path), "--state", "fail", "--state", "pruned", "--json")
    assert code == 0
    listed = json.loads(out)
    assert [(t["trial_number"], t["state"]) for t in listed] == [(1, "PRUNED"), (2, "FAIL")]
    assert listed[1]["reason"] == "ValueError: bad width"


def test_trials_n_shows_one_trial_with_its_traceback(write_config: ConfigWriter) -> None:
    path = write_config()
    _three_endings(path)

    code, out, _ = _invoke("trials", str(path), "2")
    assert code == 0
    assert "state: FAIL" in out
    assert out.rstrip().endswith('File "train.py"\nValueError: bad width')
    code, out, _ = _invoke("trials", str(path), "0", "--json")
    record = json.loads(out)
    assert (record["state"], record["values"], record["gpus"]) == (
        "COMPLETE",
        {"score": 0.75},
        ["0"],
    )
    code, _, err = _invoke("trials", str(path), "7")
    assert code == 2
    assert "has no trial 7 (trials 0 to 2); give a number from 0 to 2" in err


def test_validate_lists_every_problem_a_line_each(write_config: ConfigWriter) -> None:
    path = write_config(
        {
            "study": {"n_trails": 5},
            "execution": {"cpus_per_trial": "two"},
            "space": {"x": {"type": "floot", "low": 0, "high": 1}},
        }
    )
    code, _, err = _invoke("validate", str(path))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 3, err
    assert "study.n_trails: unknown key 'n_trails'; did you mean 'n_trials'?" in lines[0]
    assert any("execution.cpus_per_trial: expected a number" in line for line in lines)
    assert any("unknown type 'floot'; did you mean 'float'?" in line for line in lines)
    # A run names the first and counts the rest, in one line.
    code, _, err = _invoke("run", str(path))
    assert code == 2
    assert err.strip().endswith("(and 2 more problems)")
    assert len(err.strip().splitlines()) == 1


def test_validate_lists_every_problem_past_the_schema_too(write_config: ConfigWriter) -> None:
    path = write_config(
        {
            "train": "tests.train_functions:no_such_function",
            "study": {"sampler": {"type": "tpe", "options": {"n_startup_trails": 3}}},
        }
    )
    code, _, err = _invoke("validate", str(path))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert "no_such_function" in lines[0]
    assert "n_startup_trails" in lines[1]


def test_validate_refuses_the_stores_run_would_refuse_before_opening_them(
    write_config: ConfigWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    path = write_config(
        {"study": {"storage": "sqlite://optuna.db"}, "tracking": {"uri": "./mlruns"}}
    )
    code, _, err = _invoke("validate", str(path))
    assert code == 2
    assert err.strip().splitlines() == [
        f"error: {path}: tracking.uri: './mlruns' is a folder, MLflow's file store, which "
        "MLflow 3 no longer opens; name a SQLite file instead, such as "
        "sqlite:///mlruns/mlflow.db (`mlflow migrate-filestore` moves the folder's runs "
        "there), or set MLFLOW_ALLOW_FILE_STORE=true",
        f"error: {path}: study.storage: 'sqlite://optuna.db' is no database URL; a SQLite "
        "file's URL has three slashes: sqlite:///optuna.db",
    ]
    assert not Path("mlruns").exists()  # nothing opened, nothing made


def test_validate_and_run_refuse_a_database_whose_driver_is_missing_or_unknown(
    write_config: ConfigWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A driver this Python lacks, as where mysqlclient is not installed.
    monkeypatch.setitem(sys.modules, "MySQLdb", None)
    path = write_config(
        {"study": {"storage": "postgres://me@127.0.0.1/db"}, "tracking": {"uri": "mysql://me@h/db"}}
    )
    code, _, err = _invoke("validate", str(path))
    assert code == 2
    assert err.strip().splitlines() == [
        f"error: {path}: tracking.uri: 'mysql://me@h/db': its database driver, MySQLdb, is not "
        "installed here; pip install mysqlclient, or name an installed one in the URL "
        "(mysql+DRIVER://...)",
        f"error: {path}: study.storage: 'postgres://me@127.0.0.1/db': SQLAlchemy knows no "
        "database 'postgres'; write postgresql://me@127.0.0.1/db",
    ]
    # A server's URL with its colon left out read as a folder to keep runs in.
    typo = write_config({"tracking": {"uri": "http//127.0.0.1:5000"}})
    code, _, err = _invoke("validate", str(typo))
    assert (code, err.strip()) == (
        2,
        f"error: {typo}: tracking.uri: 'http//127.0.0.1:5000' has no ':' after its scheme; "
        "write http://127.0.0.1:5000",
    )
    # run: one line and exit 2, where the tracking writer's process raised a traceback.
    only_tracking = write_config({"tracking": {"uri": "mysql://me@h/db"}})
    code, _, err = _invoke("run", str(only_tracking))
    assert code == 2
    assert err.strip().splitlines() == [
        f"error: {only_tracking}: tracking.uri: 'mysql://me@h/db': its database driver, "
        "MySQLdb, is not installed here; pip install mysqlclient, or name an installed one "
        "in the URL (mysql+DRIVER://...)"
    ]
    assert not Path("mlruns").exists()  # said before the study's store was made


def test_best_export_writes_a_config_that_runs_exactly_the_best_trial(
    write_config: ConfigWriter, project: Path
) -> None:
    path = write_config({"study": {"timeout": "1h", "pruner": {"type": "median"}}})
    handle = open_study(load_config(path))
    for x in (0.3, 0.7, 0.5):
        trial = handle.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
        handle.study.tell(trial, x)
    best_x = handle.study.best_trial.params["x"]

    code, out, _ = _invoke("best", str(path), "--export", "best.yaml")
    assert code == 0, out
    exported = load_config(project / "best.yaml")
    assert exported.study.name == "test-study-trial-1"
    assert (exported.study.n_trials, exported.study.timeout) == (1, None)
    assert exported.study.pruner.type == "none"
    assert exported.experiment_name == "test-study"  # its runs beside the original's
    space = exported.search_space
    assert space.constants() == {"steps": 3}  # constants as written
    only = space.distributions()["x"]
    assert isinstance(only, optuna.distributions.CategoricalDistribution)
    assert only.choices == (best_x,)
    assert (project / "best.yaml").read_text().startswith("# trial 1 of study 'test-study'")


def test_best_export_with_several_objectives_needs_a_trial_of_the_front(
    write_config: ConfigWriter,
) -> None:
    path = write_config(
        {
            "objective": None,
            "objectives": [
                {"metric": "score", "direction": "maximize"},
                {"metric": "speed", "direction": "maximize"},
            ],
        }
    )
    handle = open_study(load_config(path))
    for x in (0.3, 0.7):
        trial = handle.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
        handle.study.tell(trial, [x, 1 - x])
    code, _, err = _invoke("best", str(path), "--export", "best.yaml")
    assert code == 2
    assert "pick one of its Pareto front with --trial N (trials 0, 1)" in err
    code, out, _ = _invoke("best", str(path), "--export", "best.yaml", "--trial", "0")
    assert code == 0, out


def test_run_takes_its_timeout_as_the_config_writes_one() -> None:
    import click

    run = main.commands["run"]

    def timeout(given: str) -> object:
        return run.make_context("run", ["c.yaml", "--timeout", given]).params["timeout"]

    assert [timeout(t) for t in ("600", "90s", "15m", "1h30m", "2.5")] == [
        600.0,
        90.0,
        900.0,
        5400.0,
        2.5,
    ]
    for bad, words in (("abc", "cannot read 'abc' as a duration"), ("0", "above 0")):
        with pytest.raises(click.BadParameter, match=words):
            timeout(bad)
