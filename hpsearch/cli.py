"""The ``hpsearch`` command: run, validate, best, trials, monitor, ui, convert.

Errors a user can fix are printed as one line on stderr with exit code 2. A
search in which no trial completed exits with 1 (naming the most common
error), one that ``study.timeout`` ended short of ``study.n_trials`` with 3,
one interrupted by Ctrl-C with 130 and by SIGTERM with 143.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from hpsearch.errors import ConfigError, HpsearchError, ResultsError, one_line
from hpsearch.interrupts import interrupted, terminated, terminated_by, terminated_exit_code
from hpsearch.storage_faults import Stores, storage_fault

if TYPE_CHECKING:
    # Each command imports what it needs: `hpsearch --help` loads click and nothing else.
    from rich.console import Console

    from hpsearch.config import RunConfig

UI_PORT = 5000
"""Where ``hpsearch ui`` serves MLflow's UI unless told otherwise."""

EXIT_NONE_COMPLETED = 1
EXIT_USER_ERROR = 2
EXIT_STOPPED_SHORT = 3
EXIT_INTERRUPTED = 130


UNWRAPPED_WIDTH = 100_000
"""The width output piped to a file or a program gets: lines are never wrapped or cut."""


def _console() -> Console:
    """Rich console for stdout: a terminal's width, or, piped, one line per event, uncut."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=UNWRAPPED_WIDTH)


_stores: list[Stores] = []
"""The stores of the config the command works on, to name them in a storage fault."""


def _note_stores(config: Path) -> RunConfig:
    """Load ``config``, remembering where it keeps its records (for :func:`storage_fault`)."""
    from hpsearch.config import load_config

    loaded = load_config(config)
    _stores[:] = [Stores(str(config), loaded.study.storage, loaded.tracking.uri)]
    return loaded


class _Group(click.Group):
    """Turns :class:`HpsearchError` into one line and exit code 2, Ctrl-C into 130 (143
    for a SIGTERM, which stops a search as Ctrl-C does)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HpsearchError as exc:
            click.echo(f"error: {one_line(str(exc))}", err=True)
            raise click.exceptions.Exit(EXIT_USER_ERROR) from None
        except Exception as exc:
            # A full disk, a read-only or corrupt store: one line, not a traceback.
            line = storage_fault(exc, _stores[0] if _stores else None)
            if line is None:
                raise
            click.echo(f"error: {line}", err=True)
            raise click.exceptions.Exit(EXIT_USER_ERROR) from None
        except KeyboardInterrupt:
            if terminated():
                click.echo(f"terminated ({terminated_by()})", err=True)
                raise click.exceptions.Exit(terminated_exit_code()) from None
            click.echo("interrupted", err=True)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None


def command() -> NoReturn:
    """The ``hpsearch`` process (the console script, ``python -m hpsearch``): :func:`main`,
    then an exit that skips tearing the interpreter's modules down one by one.

    With torch, Ray, MLflow and SQLAlchemy loaded, that teardown took 1.1-1.2 s on an
    idle 2-core machine after a search's last line, and more on a busy one; every
    exit hook (``atexit``, temporary folders, MLflow's queues) still runs first, and
    the output is flushed. ``main`` itself stays an ordinary click command, which
    tests invoke in their own process.
    """
    try:
        main()
        code: int = 0
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            code = 1
        else:
            code = exc.code or 0
    _flush()
    atexit._run_exitfuncs()
    _flush()  # what the exit hooks printed
    os._exit(code)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


@click.group(cls=_Group)
@click.version_option(package_name="hpsearch")
def main() -> None:
    """Hyperparameter search that knows how busy its GPUs are.

    Optuna decides what to try, Ray Tune runs the trials, MLflow shows them.
    """


_CONFIG = click.argument("config", type=click.Path(dir_okay=False, path_type=Path))


class _Duration(click.ParamType[float]):
    """Seconds, written as the config writes them: ``600``, ``90s``, ``15m``, ``1h30m``."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        from hpsearch._settings import parse_duration

        try:
            seconds = float(parse_duration(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if seconds <= 0:
            self.fail(f"{value!r} is not a duration above 0", param, ctx)
        return seconds


@main.command()
@_CONFIG
@click.option(
    "--address", help="Join this Ray cluster (e.g. 127.0.0.1:6379) instead of starting one."
)
@click.option("--n-trials", type=click.IntRange(min=1), help="Total trials the study should reach.")
@click.option(
    "--timeout",
    type=_Duration(),
    help="How long after which no trial starts: seconds, or 90s, 15m, 1h30m.",
)
@click.option(
    "--simulate",
    metavar="TRACE_OR_SPEC",
    help="Run against simulated GPUs (e.g. 'load:gpus=2'); see hpsearch monitor --help.",
)
@click.option(
    "--new-mlflow-history",
    is_flag=True,
    help="Go on although the MLflow store the study's runs were in is gone (start a new one).",
)
@click.option(
    "--new-study",
    is_flag=True,
    help="Start the study afresh although MLflow holds runs of its earlier trials "
    "(its file deleted or replaced).",
)
@click.option(
    "--runner",
    "runner_name",
    type=click.Choice(["ray", "simulated"]),
    default="ray",
    show_default=True,
    help="Where trials run: Ray Tune, or simulated: the modelled workload "
    "(hpsearch.workloads.simulated_gpu) played on a virtual clock, hundreds of trials in seconds.",
)
@click.option(
    "--allow-space-change",
    is_flag=True,
    help="Search a parameter's new range in the study (study.allow_space_change).",
)
def run(  # noqa: PLR0917 - click passes one parameter per option
    config: Path,
    address: str | None,
    n_trials: int | None,
    timeout: float | None,
    simulate: str | None,
    new_mlflow_history: bool,
    new_study: bool,
    runner_name: str,
    allow_space_change: bool,
) -> None:
    """Run the search CONFIG describes, or continue it where it stopped."""
    from hpsearch.api import run as run_search
    from hpsearch.runner import SimulatedRunner

    loaded = _note_stores(config)
    console = _console()
    outcome = run_search(
        loaded,
        address=address,
        n_trials=n_trials,
        timeout=timeout,
        console=console,
        simulate=simulate,
        new_mlflow_history=new_mlflow_history,
        runner=SimulatedRunner() if runner_name == "simulated" else None,
        allow_space_change=allow_space_change,
        new_study=new_study,
    )
    results = outcome.results
    if outcome.mlflow_parent_run_id is not None:
        console.print(
            f"finished {outcome.finished} trial(s) this run; MLflow parent run "
            f"{outcome.mlflow_parent_run_id}",
            highlight=False,
        )
    if outcome.mlflow_experiment_id is not None:
        console.print(_runs_table(loaded, config, outcome.mlflow_experiment_id), highlight=False)
    # A search that produced nothing is not a success, whatever stopped it.
    failed = results.why_none_completed() if outcome.finished else None
    if failed is None:
        try:
            _print_best(console, results, str(config))
        except ResultsError as exc:  # stopped before its first trial ended: said, no error
            console.print(str(exc))
    if outcome.stopped:
        console.print(
            f"the search stopped: {outcome.stopped}; `hpsearch run {config}` goes on with "
            "the study",
            highlight=False,
        )
    if outcome.interrupted:
        console.print(
            f"{outcome.interrupted} trial(s) were interrupted and will run again on the next "
            f"`hpsearch run {config}`"
        )
    # Ctrl-C exits 130 even where every trial it stopped had ended otherwise (timed out).
    if (outcome.interrupted or interrupted()) and (terminated() or not outcome.overdue):
        raise click.exceptions.Exit(terminated_exit_code() if terminated() else EXIT_INTERRUPTED)
    if failed is not None:
        click.echo(f"error: {failed}", err=True)
        raise click.exceptions.Exit(EXIT_NONE_COMPLETED)
    if outcome.timed_out and outcome.short_of:
        # Not a success: a script or scheduler chaining runs must see the budget is not met.
        limit = timeout or loaded.study.timeout or 0.0
        click.echo(
            f"stopped short: study.timeout ({limit:g} s) ended the search "
            f"{outcome.short_of} trial(s) short of study.n_trials "
            f"({n_trials or loaded.study.n_trials}); "
            f"`hpsearch run {config}` goes on, or raise study.timeout",
            err=True,
        )
        raise click.exceptions.Exit(EXIT_STOPPED_SHORT)


@main.command()
def schema() -> None:
    """Print the config's JSON Schema (for editors: # yaml-language-server: $schema=...)."""
    from hpsearch.config import config_schema

    click.echo(json.dumps(config_schema(), indent=2))


@main.command()
@click.argument("source", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the config to this file (it must not exist yet) instead of printing it.",
)
@click.option(
    "--train",
    help="What trials run, where SOURCE does not say: package.module:function, "
    "or a command line ({args} passes the parameters).",
)
@click.option("--metric", help="The objective's metric, where SOURCE does not say.")
@click.option(
    "--direction",
    type=click.Choice(["maximize", "minimize"]),
    default="maximize",
    show_default=True,
    help="The objective's direction, with --metric.",
)
@click.option("--n-trials", type=click.IntRange(min=1), help="The search's number of trials.")
def convert(  # noqa: PLR0917 - click passes one parameter per option
    source: Path,
    output: Path | None,
    train: str | None,
    metric: str | None,
    direction: str,
    n_trials: int | None,
) -> None:
    """Turn a W&B sweep (YAML), an NNI experiment (config.yml) or an NNI search space
    (search_space.json) into a config.

    A key with no hpsearch equivalent is an error naming it. The config is checked
    as `hpsearch validate` checks one before it is printed or written.
    """
    from hpsearch.config import load_config
    from hpsearch.convert import convert as converted_from

    if output is not None and output.exists():
        raise ConfigError(output, "", "already exists", "choose another --output, or remove it")
    converted = converted_from(
        source,
        train=train,
        metric=metric,
        direction="minimize" if direction == "minimize" else "maximize",
        n_trials=n_trials,
    )
    text = converted.text(source)
    if not converted.missing:  # a whole config: checked as hpsearch run would read it
        with tempfile.TemporaryDirectory() as folder:
            checked = Path(folder, output.name if output else "converted.yaml")
            checked.write_text(text, encoding="utf-8")
            try:
                load_config(checked)
            except ConfigError as exc:  # named at the source: the written file is not there
                raise ConfigError(source, exc.key, f"converted, {exc.problem}", exc.fix) from None
    if output is None:
        click.echo(text, nl=False)
        return
    output.write_text(text, encoding="utf-8")
    click.echo(f"wrote {output} ({converted.kind})", err=True)
    for line in [*(f"add {key}" for key in converted.missing), *converted.notes]:
        click.echo(f"note: {line}", err=True)


@main.command()
@_CONFIG
def validate(config: Path) -> None:
    """Check CONFIG without running anything.

    Checks the schema, the search space, the training function, the sampler and the pruner.
    The training function is checked from its module's source where that tells
    enough (it exists, takes (params, ctx), and the packages its module imports
    are installed); `hpsearch run` imports the module before any trial starts.
    """
    from hpsearch._importable import ensure_importable_from
    from hpsearch.adapters import check_train
    from hpsearch.config import load_config
    from hpsearch.pruning import check_pruner
    from hpsearch.samplers import make_sampler
    from hpsearch.tracking import check_store_uri

    try:
        loaded = load_config(config)
    except ConfigError as exc:
        _problems(exc.every_problem())
    ensure_importable_from(os.getcwd())
    problems: list[str] = []
    for check in (
        lambda: check_train(
            loaded.train_target,
            loaded.command,
            loaded.source,
            run_module=False,
            objective=loaded.optuna_objective,
            trainable=loaded.tune_trainable,
            space=loaded.search_space.searched(),
        ),
        lambda: _check_fusion(loaded),
        lambda: make_sampler(loaded.study.sampler, loaded.source, loaded.search_space),
        lambda: check_pruner(loaded.study.pruner, loaded.source),
        lambda: check_store_uri(loaded.tracking.uri, loaded.source),
        lambda: _check_storage(loaded),
    ):
        try:
            check()
        except HpsearchError as exc:
            problems.append(str(exc))
    if problems:
        _problems(problems)
    space = loaded.search_space
    objectives = ", ".join(f"{o.name} ({o.direction})" for o in loaded.objective_list)
    click.echo(
        f"{config}: ok: study '{loaded.study.name}', {len(space.distributions())} searched "
        f"parameter(s){' (and what the objective suggests)' if loaded.optuna_objective else ''}, "
        f"{len(space.constants())} constant(s), objective {objectives}, "
        f"train {loaded.train_label}"
    )


def _check_storage(config: RunConfig) -> None:
    """``study.storage`` is a database URL by its form, whose driver this Python has, as
    ``hpsearch run`` opens it."""
    from hpsearch.storage_faults import malformed_storage, missing_driver

    storage = config.study.storage
    fix = malformed_storage(storage)
    if fix is not None:
        raise ConfigError(config.source, "study.storage", f"'{storage}' is no database URL", fix)
    missing = missing_driver(storage)
    if missing is not None:
        raise ConfigError(config.source, "study.storage", f"'{storage}': {missing[0]}", missing[1])


def _check_fusion(config: RunConfig) -> None:
    """``fusion``'s function takes members, and the parameters they share are known."""
    from hpsearch.adapters import check_fusion

    if config.fusion.fuses:
        check_fusion(config.fusion.train, config.fusion.shared, config.space, config.source)


def _problems(lines: list[str]) -> NoReturn:
    """Every problem of a config, a line each, then exit 2."""
    for line in lines:
        click.echo(f"error: {line}", err=True)
    raise click.exceptions.Exit(EXIT_USER_ERROR)


@main.command()
@_CONFIG
@click.option("--json", "as_json", is_flag=True, help="Print JSON (a list for several objectives).")
@click.option(
    "--pareto",
    is_flag=True,
    help="The Pareto front of a study with several objectives (an error with one).",
)
@click.option("--oom", is_flag=True, help="List the trials pruned for running out of memory.")
@click.option(
    "--export",
    "export",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a config that runs exactly the best trial (with --trial: that trial).",
)
@click.option(
    "--trial",
    "number",
    type=click.IntRange(min=0),
    help="With --export: this trial (with several objectives, one of the front).",
)
def best(  # noqa: PLR0917 - click passes one parameter per option
    config: Path,
    as_json: bool,
    pareto: bool,
    oom: bool,
    export: Path | None,
    number: int | None,
) -> None:
    """Show the best trial of CONFIG's study (the Pareto front for several objectives)."""
    from hpsearch.results import load

    loaded = _note_stores(config)
    results = load(config)
    names = results.metric_names
    if export is not None:
        _export(loaded, results, number, export)
        return
    if oom:
        _print_oom(results.oom_trials(), as_json)
        return
    if pareto:
        front = results.pareto_front()
        if as_json:
            click.echo(json.dumps([t.to_dict(names) for t in front], indent=2, sort_keys=True))
            return
    if as_json:
        if results.is_multi_objective:
            payload: Any = [t.to_dict(names) for t in results.best_trials]
        else:
            payload = results.best_trial.to_dict(names)
        click.echo(json.dumps(payload, indent=2, sort_keys=True))
        return
    _print_best(_console(), results, str(config))


def _export(loaded: RunConfig, results: Any, number: int | None, path: Path) -> None:
    """Write the config that runs one trial (the best, or ``number``) again."""
    from hpsearch.results import trial_config, write_trial_config

    if number is None:
        if results.is_multi_objective:
            front = ", ".join(str(t.number) for t in results.best_trials)
            raise HpsearchError(
                f"study '{results.name}' has several objectives, so no single best trial; "
                f"pick one of its Pareto front with --trial N (trials {front or 'none yet'})"
            )
        number = results.best_trial.number
    name = f"{results.name}-trial-{number}"
    data = trial_config(loaded, results.trial(number), name)
    note = f"trial {number} of study '{results.name}' ({loaded.source}), as study '{name}'"
    write_trial_config(data, path, note)
    click.echo(f"wrote {path}: {note}; run it with: hpsearch run {path}")


@main.command()
@_CONFIG
@click.argument("number", type=click.IntRange(min=0))
def rerun(config: Path, number: int) -> None:
    """Run trial NUMBER of CONFIG's study once more, outside its budget, and compare.

    The rerun is a study of its own (``<study>-rerun-<N>-<time>``) in the same
    storage, its MLflow run beside the original's; both runs' metrics are shown
    side by side.
    """
    from rich.table import Table

    from hpsearch.api import run as run_search
    from hpsearch.config import load_config
    from hpsearch.results import load, trial_config, write_trial_config

    loaded = _note_stores(config)
    original = load(config).trial(number)
    name = f"{loaded.study.name}-rerun-{number}-{time.strftime('%Y%m%d-%H%M%S')}"
    objective = loaded.optuna_objective is not None
    data = trial_config(loaded, original, name, enqueued=objective)
    # A file of its own, beside CONFIG: relative paths in it (the stores, a trace) are
    # read from the working directory, as CONFIG's are.
    with tempfile.TemporaryDirectory(dir=config.resolve().parent) as folder:
        path = Path(folder) / config.name
        write_trial_config(data, path, f"rerun of trial {number} of {config}")
        rerun_config = load_config(path)
        if objective:
            # An Optuna objective's suggest_* calls take the enqueued values, as under Optuna.
            from hpsearch.study import open_study

            open_study(rerun_config).study.enqueue_trial(original.params)
        outcome = run_search(rerun_config, console=_console())
    again = outcome.results.trials[0]
    table = Table(title=f"trial {number} and its rerun", title_justify="left")
    for column in ("", f"trial {number}", f"rerun (trial 0 of {name})"):
        table.add_column(column)
    table.add_row("state", original.state, again.state)
    table.add_row("mlflow run", original.mlflow_run_id or "-", again.mlflow_run_id or "-")
    for metric in sorted({*original.metrics, *again.metrics}):
        table.add_row(
            metric, _value(original.metrics.get(metric)), _value(again.metrics.get(metric))
        )
    _console().print(table)
    if again.state != "COMPLETE":
        raise click.exceptions.Exit(EXIT_NONE_COMPLETED)


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


_STATES = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")


@main.command()
@_CONFIG
@click.argument("number", required=False, type=click.IntRange(min=0))
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(_STATES, case_sensitive=False),
    help="Only trials in this state (repeat for several).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per trial).")
def trials(config: Path, number: int | None, states: tuple[str, ...], as_json: bool) -> None:
    """List every trial of CONFIG's study, or show trial NUMBER with its traceback.

    Each trial: its number, state, duration, objective values, parameters, why it was
    pruned or failed, its GPUs and its MLflow run.
    """
    from rich.table import Table

    from hpsearch.results import load

    _note_stores(config)
    results = load(config)
    names = results.metric_names
    if number is not None:
        trial = results.trial(number)
        if as_json:
            click.echo(json.dumps(trial.record(names), indent=2, sort_keys=True))
        else:
            _print_trial(trial.record(names))
        return
    wanted = {s.upper() for s in states}
    shown = [t for t in results.trials if not wanted or t.state in wanted]
    if as_json:
        click.echo(json.dumps([t.record(names) for t in shown], indent=2, sort_keys=True))
        return
    table = Table(title=f"{results.name}: {len(shown)} trial(s)", title_justify="left")
    fused = any(t.fused_group is not None for t in shown)
    columns = ("trial", "state", "duration", *names, "params", "reason", "gpu", "mlflow run")
    for column in (*columns[:3], "group", *columns[3:]) if fused else columns:
        table.add_column(column, justify="right" if column in {"trial", "duration"} else "left")
    for trial in shown:
        values = trial.values or []
        group = [str(trial.fused_group) if trial.fused_group is not None else "-"]
        table.add_row(
            str(trial.number),
            trial.state,
            f"{trial.duration_s:.1f}s" if trial.duration_s is not None else "-",
            *(group if fused else []),
            *([f"{v:.6g}" for v in values] or ["-"] * len(names)),
            ", ".join(f"{k}={_short(v)}" for k, v in trial.params.items()) or "-",
            trial.reason or "-",
            ",".join(trial.gpus) or "-",
            trial.mlflow_run_id or "-",
        )
    _console().print(table)


def _runs_table(config: RunConfig, path: Path, experiment_id: str) -> str:
    """Where to see the search's runs: the runs table's URL, and how to serve it."""
    from hpsearch._secrets import without_passwords
    from hpsearch.tracking import runs_table_url

    uri = config.tracking.uri
    # Sorted by the first objective, best first: the trials listed flat, not folded
    # under the search's run.
    first = config.objective_list[0]
    metric, ascending = first.metric, first.direction == "minimize"
    if uri.startswith(("http://", "https://")):
        shown = without_passwords(runs_table_url(uri, experiment_id, metric, ascending))
        return f"runs table: {shown}"  # a server's credentials are not printed
    served = runs_table_url(f"http://127.0.0.1:{UI_PORT}", experiment_id, metric, ascending)
    return f"runs table: {served} (serve it with: hpsearch ui {path})"


def _print_trial(record: dict[str, Any]) -> None:
    """One trial, a line per field; its error (a traceback) in full at the end."""
    for key in ("study", "trial_number", "state", "duration_s", "values", "params", "metrics"):
        click.echo(f"{key}: {record[key]}")
    for key in ("gpus", "mlflow_run_id", "prune_reason", "oom", "user_attrs", "constraints"):
        if record[key]:
            click.echo(f"{key}: {record[key]}")
    if record["error"]:
        click.echo("error:")
        click.echo(record["error"])


@main.command()
@click.argument("config", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=UI_PORT, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--allowed-hosts",
    help="Host headers the UI answers (comma-separated, * patterns), as MLflow's option. "
    "Default with a --host other than loopback: this machine's names and addresses, "
    "localhost and private addresses (an SSH tunnel, the LAN).",
)
def ui(config: Path | None, host: str, port: int, allowed_hosts: str | None) -> None:
    """Start the MLflow UI on the store CONFIG writes to (default: mlruns/mlflow.db)."""
    from hpsearch.config import DEFAULT_ARTIFACT_LOCATION, DEFAULT_TRACKING_URI, load_config
    from hpsearch.tracking import resolve_artifact_location, resolve_tracking_uri

    uri, artifacts = DEFAULT_TRACKING_URI, DEFAULT_ARTIFACT_LOCATION
    where = f"`hpsearch run {config}`" if config is not None else "a search"
    if config is not None:
        loaded = load_config(config)
        uri, artifacts = loaded.tracking.uri, loaded.tracking.artifact_location
    if not uri.startswith("sqlite:"):
        raise HpsearchError(f"tracking.uri is {uri}: that tracking server has its own UI; open it")
    store = Path(uri.removeprefix("sqlite:///"))
    if not store.exists():
        # MLflow would create an empty store there and show nothing.
        raise HpsearchError(
            f"no MLflow store at {store.resolve()} (tracking.uri {uri}); run {where} first, "
            "or start hpsearch ui from the folder the search ran in"
        )
    mlflow = shutil.which("mlflow", path=str(Path(sys.executable).parent)) or shutil.which("mlflow")
    if mlflow is None:
        raise HpsearchError("the mlflow command is not installed; pip install mlflow")
    command = [
        mlflow,
        "ui",
        "--backend-store-uri",
        resolve_tracking_uri(uri),
        "--default-artifact-root",
        resolve_artifact_location(artifacts),
        "--host",
        host,
        "--port",
        str(port),
    ]
    taken = _port_taken(host, port)
    if taken is not None:
        # MLflow would say "Address already in use" and exit 0 after our line said it ran.
        raise HpsearchError(
            f"port {port} on {host} is taken ({taken}): another MLflow UI, or another "
            f"program; pass --port {port + 1}, or stop what holds it"
        )
    if allowed_hosts is None and not _loopback(host):
        allowed_hosts = ",".join(_this_machines_hosts())
    if allowed_hosts is not None:
        command += ["--allowed-hosts", allowed_hosts]
    click.echo(f"MLflow UI on http://{host}:{port} (Ctrl-C to stop)")
    sys.stdout.flush()
    # The UI's libraries warn about their own dependencies: not the user's concern.
    # MLflow 3's job runner (seven worker processes, about 2 GB, polling) serves GenAI
    # features (scorers, trace archival) a tuning study has no use for.
    env = {JOB_EXECUTION: "false", **os.environ, "PYTHONWARNINGS": "ignore"}
    os.execve(mlflow, command, env)


JOB_EXECUTION = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"
"""MLflow's switch for its server's job runner (off in ``hpsearch ui`` unless set)."""


def _port_taken(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on, or ``None`` when it can (as MLflow's server
    binds it: a listening socket)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return None  # a name it cannot resolve: MLflow's server says so itself
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # As the server sets it: a port a stopped UI's connections still wait on is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def _loopback(host: str) -> bool:
    return host in {"127.0.0.1", "localhost", "::1"}


def _this_machines_hosts() -> list[str]:
    """Host headers a UI on every interface should answer: MLflow's defaults (localhost,
    private addresses) and this machine's own names and addresses, with any port."""
    import socket

    from mlflow.server.security_utils import get_default_allowed_hosts

    names = {socket.gethostname(), socket.getfqdn()}
    with contextlib.suppress(OSError):
        names.update(socket.gethostbyname_ex(socket.gethostname())[2])
    ours = [pattern for name in sorted(names) for pattern in (name, f"{name}:*")]
    return list(dict.fromkeys([*get_default_allowed_hosts(), *ours]))


@main.command()
@click.argument("config", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--duration",
    type=_Duration(),
    help="How long to sample (600, 90s, 15m); default: until Ctrl-C.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.01),
    help="Seconds between samples (default: telemetry.interval_s of CONFIG, else 1).",
)
@click.option(
    "--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), help="Write every sample."
)
@click.option(
    "--simulate",
    metavar="TRACE_OR_SPEC",
    help="Simulated GPUs: a built-in trace (rtx4050-seed004, rtx4060-seed000, rtx3090-seed001), "
    "a CSV trace, 'constant:utilization_pct=95,...' or 'load:gpus=2'.",
)
@click.option(
    "--target-util",
    type=click.FloatRange(1, 100),
    help="Predicted busy share (%) the packing estimate fills a GPU up to "
    "[default: the packing policy's target].",
)
def monitor(
    config: Path | None,
    *,
    duration: float | None,
    interval: float | None,
    csv_path: Path | None,
    simulate: str | None,
    target_util: float | None,
) -> None:
    """Watch the GPUs, then report how well they were used and what to change.

    Reads the GPUs through NVML (or CONFIG's telemetry section, or --simulate).
    Prints a live view, writes every sample with --csv, and ends with a report
    per GPU: utilisation, memory and power, readings dropped as measurement
    errors, a verdict, and recommendations with their arithmetic.
    """
    from hpsearch.config import TelemetrySpec, load_config
    from hpsearch.gpu_telemetry import open_backend
    from hpsearch.monitoring import watch
    from hpsearch.placement import TARGET_UTIL_PCT
    from hpsearch.simulation import parse_simulate

    spec = load_config(config).telemetry if config is not None else TelemetrySpec()
    if simulate is not None:
        try:
            simulated = parse_simulate(simulate)
        except ValueError as exc:
            raise HpsearchError(f"--simulate: {exc}") from None
        spec = spec.model_copy(update={"backend": "simulated", "simulated": simulated})
    opened = open_backend(spec)
    backend, line = opened.backend, opened.line
    console = _console()
    if backend is None:
        click.echo(f"{line}; nothing to monitor (try --simulate rtx4050-seed004)", err=True)
        raise click.exceptions.Exit(1)
    click.echo(line)
    try:
        result = watch(
            backend,
            duration_s=duration,
            interval_s=interval or spec.interval_s,
            csv_path=csv_path,
            console=console,
            target_util_pct=TARGET_UTIL_PCT if target_util is None else target_util,
        )
    finally:
        backend.close()
    click.echo(result.report, nl=False)
    if csv_path is not None:
        click.echo(f"{result.samples} samples per GPU written to {csv_path}")


def _print_best(console: Console, results: Any, config: str) -> None:
    from rich.table import Table

    # A study with no completed trial raises ResultsError: for `hpsearch best`, one line
    # and exit code 2, as with --json, so that `hpsearch best CONFIG && ...` stops there.
    trials = results.best_trials
    title = "Pareto front" if results.is_multi_objective else "best trial"
    table = Table(title=f"{results.name}: {title}", title_justify="left")
    table.add_column("trial", justify="right")
    for metric in results.metric_names:
        table.add_column(metric, justify="right")
    table.add_column("params")
    table.add_column("mlflow run")
    for trial in trials:
        values = [f"{v:.6g}" for v in trial.values or []]
        params = ", ".join(f"{k}={_short(v)}" for k, v in trial.params.items())
        table.add_row(str(trial.number), *values, params, trial.mlflow_run_id or "-")
    console.print(table)


def _print_oom(trials: list[Any], as_json: bool) -> None:
    from rich.table import Table

    if as_json:
        payload = [
            {
                "trial_number": t.number,
                "params": t.params,
                "oom": t.oom,
                "prune_reason": t.prune_reason,
                "mlflow_run_id": t.mlflow_run_id,
            }
            for t in trials
        ]
        click.echo(json.dumps(payload, indent=2, sort_keys=True))
        return
    if not trials:
        click.echo("no trial ran out of memory")
        return
    table = Table(title="trials pruned for memory", title_justify="left")
    for column in ("trial", "kind", "params", "reason"):
        table.add_column(column)
    from hpsearch.oom import OomRecord

    for trial in trials:
        params = ", ".join(f"{k}={_short(v)}" for k, v in trial.params.items())
        kind = "predicted" if OomRecord.from_dict(trial.oom).predicted else "oom"
        table.add_row(str(trial.number), kind, params, trial.prune_reason or "")
    _console().print(table)


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
