"""The typed shape of a config file. Every section rejects keys it does not know.

Pure data. The sections a package reads are declared in that package and
composed here: ``packing`` (:mod:`hpsearch.placement`), ``oom``
(:mod:`hpsearch.oom`), ``telemetry.simulated`` (:mod:`hpsearch.simulation`), a
training script's ``train`` (:mod:`hpsearch.trial.script`). Each setting is
declared once; the object read from the file is the one its reader gets.
"""

from __future__ import annotations

import difflib
import math
import os
import warnings
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    Tag,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from hpsearch._importable import ensure_importable_from
from hpsearch._settings import OffAsWritten, Seconds, Settings
from hpsearch.adapters.forms import Form, form_in_source, wrong_form
from hpsearch.oom.settings import OomSpec
from hpsearch.placement.settings import FusionSpec, PackingSpec
from hpsearch.simulation.spec import SimulatedSpec
from hpsearch.space import SEARCHED_TYPES, ParamSpec, SearchSpace, expand_space, flat_names
from hpsearch.trial.other_tools import TARGET_PATTERN, OptunaObjectiveSpec, TuneTrainableSpec
from hpsearch.trial.script import CommandSpec

DEFAULT_STUDY_STORAGE = "sqlite:///mlruns/optuna.db"
MEMORY_STORAGE = "memory"
"""``study.storage`` for a study kept in the driver's memory only (Optuna's
``InMemoryStorage``): nothing is left when the search ends, and no other driver or
command can read it. For throw-away searches and the packing lab."""
DEFAULT_TRACKING_URI = "sqlite:///mlruns/mlflow.db"
DEFAULT_ARTIFACT_LOCATION = "mlruns/artifacts"


class TargetSpec(Settings):
    """A level a metric must reach: ``at_least`` (accuracy) or ``at_most`` (loss).

    Attributes:
        metric: the metric that must reach the level, as the trial reports it.
        at_least: reached at this value or above (give this or ``at_most``).
        at_most: reached at this value or below (give this or ``at_least``).
    """

    metric: str = Field(min_length=1)
    at_least: float | None = None
    at_most: float | None = None

    @model_validator(mode="after")
    def _one_bound(self) -> TargetSpec:
        if (self.at_least is None) == (self.at_most is None):
            raise ValueError(
                "give exactly one of at_least or at_most, e.g. "
                "until: {metric: val_accuracy, at_least: 0.95}"
            )
        return self

    def reached(self, metrics: dict[str, float]) -> bool:
        """Whether ``metrics`` holds the target metric at its level."""
        value = metrics.get(self.metric)
        if value is None:
            return False
        if self.at_least is not None:
            return value >= self.at_least
        return self.at_most is not None and value <= self.at_most

    @property
    def label(self) -> str:
        """E.g. ``val_accuracy>=0.95``."""
        if self.at_least is not None:
            return f"{self.metric}>={self.at_least:g}"
        return f"{self.metric}<={self.at_most:g}"


class ObjectiveSpec(Settings):
    """One metric the search optimises: its name as reported by the trial, and a direction.

    With ``until``, the objective is the metric's value at the first report where
    another metric reached a level, e.g. ``{metric: gpu_seconds, direction:
    minimize, until: {metric: val_accuracy, at_least: 0.95}}``: GPU-seconds to
    95% accuracy. A trial that never reaches it gets the worst value (+inf when
    minimising, -inf when maximising).

    Attributes:
        metric: the metric's name, as the trial reports it (``ctx.report``, a returned
            dict, a JSON line); an Optuna objective's value is ``value`` where none is
            named (``value_0``, ``value_1``, ... for a tuple), as Optuna's MLflow callback
            names it.
        direction: whether a larger or a smaller value is better.
        until: the level another metric must reach; the objective is this metric's
            value at that report (none: its last value).
    """

    metric: str = Field(min_length=1)
    direction: Literal["maximize", "minimize"]
    until: TargetSpec | None = None

    @property
    def name(self) -> str:
        """The objective's name in the study: the metric, or ``metric@target`` with ``until``."""
        return self.metric if self.until is None else f"{self.metric}@{self.until.label}"


class SamplerSpec(Settings):
    """Which Optuna sampler decides what to try. ``options`` go to its constructor.

    Attributes:
        type: ``tpe``, ``random``, ``nsga2``, ``gp``, ``grid``, ``cmaes``, ``qmc``, or
            any sampler class by import path (``package.module:Class``); see
            :mod:`hpsearch.samplers`.
        seed: seeds the sampler, and each trial's seed (``ctx.seed``) derives from it.
        options: keyword arguments of the sampler's constructor.
    """

    type: str = Field(default="tpe", min_length=1)
    seed: int | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @field_serializer("options", when_used="json")
    def _options_recorded(self, options: dict[str, Any]) -> dict[str, Any]:
        """What the study and the parent run record of the options: an object a dict
        config gave (a sampler of its own) by its class's name, not a failed dump."""
        return {name: _recorded(value) for name, value in options.items()}


def _recorded(value: Any) -> Any:
    """``value`` as JSON holds it: data as it is, an object as ``<Class object>``."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): _recorded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_recorded(v) for v in value]
    return f"<{type(value).__name__} object>"


class PrunerSpec(Settings):
    """What stops unpromising trials early. ``options`` go to the pruner's constructor.

    ``median``, ``percentile``, ``successive_halving``, ``hyperband``, ``threshold``
    (``lower``/``upper`` bounds), ``wilcoxon`` and ``patient`` are Optuna's pruners; with
    several objectives they judge the first (the primary) objective. ``patient`` prunes a
    trial whose last ``patience`` + 1 reports fell short of its best before them (by more
    than ``min_delta``), where the pruner it wraps agrees: ``wrapped_pruner`` is a pruner
    section of its own (``{type: median, options: {n_warmup_steps: 2}}``) or its type
    alone; left out, patience alone decides.
    ``dominated`` prunes a trial that another trial beats on every objective at the
    same step (options ``n_startup_trials``, ``n_warmup_steps``, ``min_dominating``).

    Attributes:
        type: the pruner; ``none`` lets every trial run to its end.
        options: keyword arguments of the pruner's constructor (e.g.
            ``n_warmup_steps: 2``).
    """

    type: Literal[
        "none",
        "median",
        "percentile",
        "successive_halving",
        "hyperband",
        "threshold",
        "wilcoxon",
        "patient",
        "dominated",
    ] = "none"
    options: dict[str, Any] = Field(default_factory=dict)


class StudySpec(Settings):
    """The Optuna study: its name, storage, sampler, pruner and budget.

    Attributes:
        name: the study's name in its storage: a second run of the same name goes on
            with its trials (a new name starts a new study).
        storage: where the study is kept: an SQLAlchemy URL (a SQLite file, or
            PostgreSQL for drivers on several machines), or ``memory`` (kept in the
            process: gone when it ends).
        sampler: how Optuna decides what to try next.
        pruner: what stops unpromising trials early.
        n_trials: trials the study should reach, over every run (with the ``grid``
            sampler, at most its points: it may then be left out).
        timeout: no trial starts after this long (seconds, or ``90s``, ``15m``, ``1h30m``);
            trials already running finish, as in ``Study.optimize``.
        timeout_grace: with ``timeout``, trials still running this long after it are
            stopped and run again on the next ``hpsearch run`` (off by default).
        heartbeat_grace: a RUNNING trial whose driver has not stamped it alive for
            this long (the driver was killed, or its machine lost) is failed by
            another driver, or by the next run, and run again (Optuna's heartbeat
            grace period; the driver stamps three times as often, at most every 10 s).
        allow_space_change: a parameter's range (``low``, ``high``, ``step``) may differ
            from the study's: the change is meant (``--allow-space-change``). Its kind,
            log scale and choices may never differ: Optuna cannot mix those.
        strict_space: a parameter added to, or removed from, the study's space stops
            the run instead of being noted.
        enqueue: trials to run first, each a mapping of parameter values, e.g.
            ``[{lr: 0.001, width: 256}]``: a configuration known to be good, or the
            defaults to beat (Optuna's ``enqueue_trial``, Ray Tune's
            ``points_to_evaluate``). Parameters left out are sampled. A run enqueues
            only those the study has not run or queued already.
        max_initial_failures: a run whose first this many trials all fail (none
            completed or was pruned) starts no more, those running finish, and it exits
            naming their error, as W&B's agent stops: a cause they share (a metric's
            name, an import, a script's flag) would fail the whole budget. ``0``: never.
    """

    name: str = Field(min_length=1)
    storage: str = DEFAULT_STUDY_STORAGE
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    pruner: PrunerSpec = Field(default_factory=PrunerSpec)
    n_trials: PositiveInt | None = None
    timeout: Seconds | None = None
    timeout_grace: Seconds | None = None
    heartbeat_grace: Seconds = Field(default=30.0, ge=3)
    allow_space_change: bool = False
    strict_space: bool = False
    enqueue: list[dict[str, Any]] = Field(default_factory=list)
    max_initial_failures: int = Field(default=5, ge=0)


class ExecutionSpec(Settings):
    """Where and how trials run on Ray.

    Attributes:
        address: an existing Ray cluster to join (``auto``, ``ray://…`` or ``host:port``);
            none starts a local Ray bound to 127.0.0.1 for the duration of the run.
        max_concurrent: most trials at once; none lets the resources decide.
        cpus_per_trial: CPUs Ray reserves for each trial; at most what one node has (a
            local Ray: ``num_cpus``, or this machine's CPUs), or no trial could start and
            the run is refused. On a cluster joined by ``address``, trials asking more
            than any node has wait for one to join (Ray's autoscaler), as under Tune.
        num_cpus, num_gpus: resources of the local Ray (ignored with ``address``);
            ``num_gpus`` declares logical GPUs, useful to test placement without one.
        reuse_workers: keep trial worker processes between trials of the same shape,
            which saves Ray's worker start-up (2.8 s against 0.58 s of overhead per
            trial in scripts/bench_overhead.py on 2 CPUs).
        runtime_env: Ray runtime environment for the job (e.g. ``working_dir``, ``pip``).
        trial_timeout: the longest one trial may run (seconds, or ``90m``, ``2h``); a
            trial past it is stopped and ends FAIL with reason ``timeout``. Off by default.
        hang_timeout: how long a trial may be still (its threads and processes not
            running at all, no report) before it is taken for hung (a deadlock, a read
            with no timeout): its worker is ended and it ends FAIL with reason ``hung``;
            the search goes on. A trial that waits this long on purpose in a call that
            never wakes (a blocking read from a job elsewhere) needs more, or ``null``:
            never; ``ray.get`` on its own Ray tasks wakes each second, and is not still.
        trials_dir: each trial's own folder is ``<dir>/<study>/trial-<N>``, kept after
            it ends: ``HPSEARCH_TRIAL_DIR`` in the trial's environment, and PyTorch
            Lightning's ``default_root_dir`` unless the code gives one.
        checkpoint_dir: where trials' checkpoints go (``<dir>/<study>/trial-<N>``); on a
            cluster, a folder every node reaches (a shared filesystem).
    """

    address: str | None = None
    max_concurrent: PositiveInt | None = None
    cpus_per_trial: PositiveFloat = 1.0
    num_cpus: PositiveInt | None = None
    num_gpus: int | None = Field(default=None, ge=0)
    reuse_workers: bool = True
    runtime_env: dict[str, Any] = Field(default_factory=dict)
    trial_timeout: Seconds | None = None
    hang_timeout: Seconds | None = 600.0
    trials_dir: str = Field(default="mlruns/trials", min_length=1)
    checkpoint_dir: str = Field(default="mlruns/checkpoints", min_length=1)

    @model_validator(mode="after")
    def _a_trial_fits_the_local_ray(self) -> ExecutionSpec:
        # Ray would hold every trial back for ever (Tune only warns, after a minute).
        if self.num_cpus is not None and not self.address and self.cpus_per_trial > self.num_cpus:
            raise ValueError(
                f"cpus_per_trial: a trial asks {self.cpus_per_trial:g} CPUs, but num_cpus gives "
                f"the local Ray {self.num_cpus}, so no trial would ever start; lower "
                f"cpus_per_trial to at most {self.num_cpus}, or raise num_cpus"
            )
        return self

    @model_validator(mode="after")
    def _runtime_env_fields_rays(self) -> ExecutionSpec:
        # Ray takes any other name as a plugin's, and without one ignores it: a typo
        # (env_var) would leave the workers without what it set, unsaid.
        for name in self.runtime_env:
            if name not in RAY_RUNTIME_ENV_FIELDS:
                close = difflib.get_close_matches(name, RAY_RUNTIME_ENV_FIELDS, n=1)
                warnings.warn(
                    f"execution.runtime_env.{name}: none of Ray's fields"
                    + (f" (did you mean '{close[0]}'?)" if close else "")
                    + f"; Ray gives it to a runtime_env plugin of that name, if one is set "
                    f"up, and else ignores it (its fields: {', '.join(RAY_RUNTIME_ENV_FIELDS)})",
                    ConfigKeyWarning,
                    stacklevel=2,
                )
        return self

    def max_pending(self, cpus: float) -> int:
        """The most trials that may be starting at once on a runner with ``cpus`` CPUs."""
        return self.max_concurrent or max(1, math.floor(cpus / self.cpus_per_trial))


class ConfigKeyWarning(UserWarning):
    """A config's value that runs but likely not as meant; its message starts with the
    key (``execution.runtime_env.env_var: ...``), said at that key's line of the file."""


RAY_RUNTIME_ENV_FIELDS = (
    "working_dir",
    "py_modules",
    "py_executable",
    "excludes",
    "pip",
    "uv",
    "conda",
    "env_vars",
    "image_uri",
    "container",
    "worker_process_setup_hook",
    "java_jars",
    "config",
    "nsight",
    "mpi",
)
"""What Ray's ``runtime_env`` takes by name (``ray.runtime_env.RuntimeEnv``'s fields, and
its ``nsight`` and ``mpi`` plugins'), said here so the config imports no Ray."""

_DATABASE_SERVERS = ("postgresql", "postgres", "mysql", "mssql", "oracle")
"""The schemes of tracking URIs that name a database server (SQLAlchemy's)."""
LONG_SEARCH_TRIALS = 500
"""A trial budget from which ``tracking.writer: auto`` writes a SQLite store by a process."""


class TrackingSpec(Settings):
    """Where MLflow records runs. The experiment defaults to the study name.

    Attributes:
        uri: a SQLite file, or a tracking server (``http://host:port``).
        experiment: the MLflow experiment; the study name when left out.
        artifact_location: where a new experiment keeps artifacts (a server's own
            store when ``uri`` is a server and this is left out).
        outage_limit: how long a tracking server may stay out of reach (seconds, or
            ``10m``) while the search goes on and its writes wait; past it, the search
            stops as on Ctrl-C (trials queued again) and exits 2.
        writer: where the runs are written: ``process``, a process of its own beside
            the driver (MLflow's Python off the search's core, the driver handing
            it each write and going on); ``driver``, the driver itself; ``auto``,
            a process for a database server (PostgreSQL, MySQL, where a write is
            round trips the driver would wait through) and for a search of 500
            trials or more (``study.n_trials``) on a machine of two cores or more,
            where the writes would take the driver's time from the trials ending;
            the driver otherwise. A tracking server (``http://``) is written by the
            driver.
        figures: whether the search ends by drawing Optuna's analysis figures on its
            parent run (``analysis/``: optimisation history, parameter importances,
            parallel coordinates, the Pareto front). ``false`` leaves them out, and
            with them the 2-3 CPU-seconds their libraries (plotly, scikit-learn) take
            to load in each ``hpsearch run``: for many short searches, as in a test
            suite or CI. The Pareto front's CSV is written either way.
    """

    uri: str = DEFAULT_TRACKING_URI
    experiment: str | None = None
    artifact_location: str = DEFAULT_ARTIFACT_LOCATION
    outage_limit: Seconds = 600.0
    writer: Literal["auto", "process", "driver"] = "auto"
    figures: bool = True

    @model_validator(mode="after")
    def _no_writer_process_for_a_server(self) -> TrackingSpec:
        if self.writer == "process" and self.server:
            raise ValueError(
                "writer: process writes a database store, not a tracking server "
                f"({self.uri}), whose outages the driver rides out; use auto or driver"
            )
        return self

    def writes_in_process(self, n_trials: int | None) -> bool:
        """Whether a process of its own writes the runs (``writer``) of a search of
        ``n_trials`` (``study.n_trials``)."""
        if self.writer != "auto":
            return self.writer == "process"
        if self.server:
            return False
        scheme = self.uri.partition("://")[0].partition("+")[0]
        if scheme in _DATABASE_SERVERS:
            return True
        # On a SQLite file, a process pays from a few hundred trials on: it is one more
        # Python with MLflow to start (2-3 CPU-seconds) and to wait for at the end, and
        # it takes MLflow's writes (about half the driver's CPU a trial) to another core.
        # The same search on the simulated runner, 2 cores, driver → process: 300 trials
        # 14.5 s → 15.9 s; 500, 21.8 s → 16-20 s; 1,000, 40-44 s → 28-29 s.
        long = n_trials is not None and n_trials >= LONG_SEARCH_TRIALS
        return scheme == "sqlite" and long and (os.cpu_count() or 1) >= 2

    @property
    def server(self) -> bool:
        """Whether ``uri`` is a tracking server (which may stop answering for a while)."""
        return self.uri.startswith(("http://", "https://"))

    @property
    def new_experiment_artifacts(self) -> str | None:
        """Where a new experiment keeps its artifacts; ``None``: where the server says.

        A tracking server (``http(s)://``) serves artifacts from its own store
        (``mlflow server --artifacts-destination``), which every node can reach; a
        local folder would exist on the driver's machine only. A location the config
        names is used anyway.
        """
        if self.server and "artifact_location" not in self.model_fields_set:
            return None
        return self.artifact_location


class TelemetrySpec(Settings):
    """GPU telemetry during a search and for ``hpsearch monitor``.

    Attributes:
        backend: ``auto`` reads NVIDIA GPUs through NVML when there are any and
            runs without telemetry otherwise (one line says so); ``nvml`` requires
            them; ``simulated`` reads simulated GPUs (see ``simulated``); ``off``
            reads nothing.
        interval_s: seconds between samples: fast enough to see trials that last
            under a second (NVML answers in microseconds; each trial's MLflow series
            keeps a point a second).
        window_s: the rolling window that live summaries cover.
        simulated: the simulated GPUs, with ``backend: simulated``.
    """

    backend: Annotated[Literal["auto", "nvml", "simulated", "off"], OffAsWritten] = "auto"
    interval_s: Seconds = 0.2
    window_s: Seconds = 60.0
    simulated: SimulatedSpec | None = None

    @model_validator(mode="after")
    def _simulated_only_when_simulating(self) -> TelemetrySpec:
        if self.simulated is not None and self.backend != "simulated":
            raise ValueError(
                f"simulated is set but backend is {self.backend}; "
                "set backend: simulated to use it, or remove simulated"
            )
        return self

    @property
    def simulation(self) -> SimulatedSpec:
        """The simulated GPUs (defaults when the section is left out)."""
        return self.simulated or SimulatedSpec()

    @property
    def simulating(self) -> SimulatedSpec | None:
        """The simulated GPUs the search runs on (``None``: it reads real ones, or none)."""
        return self.simulation if self.backend == "simulated" else None


def _train_kind(value: Any) -> str:
    """``train`` is a function's name, a script's mapping, ``{optuna: ...}`` (an Optuna
    objective) or ``{tune: ...}`` (a Ray Tune function trainable)."""
    if isinstance(value, OptunaObjectiveSpec) or (isinstance(value, Mapping) and "optuna" in value):
        return "optuna"
    if isinstance(value, TuneTrainableSpec) or (isinstance(value, Mapping) and "tune" in value):
        return "tune"
    return "script" if isinstance(value, Mapping | CommandSpec) else "function"


def _expand_space(value: Any) -> Any:
    if isinstance(value, str):
        # A Ray Tune param_space in the user's code: `space: mymod:param_space`.
        from hpsearch.adapters.tune_space import space_from_tune

        return expand_space(space_from_tune(value))
    if callable(value) and not isinstance(value, dict):
        # A dict config's own function (a notebook's): read here, in the driver, as
        # `space: mymod:name` reads the function it names.
        from hpsearch.adapters.tune_space import space_of

        name = getattr(value, "__qualname__", type(value).__name__)
        return expand_space(space_of(f"{getattr(value, '__module__', '__main__')}:{name}", value))
    if isinstance(value, dict):
        from hpsearch.adapters.tune_space import converted, holds_tune_domain

        # A dict config's Tune domains (tune.loguniform(...) in a notebook), each read as
        # a Tune param_space's entry; the other entries as the space section reads them.
        entries: dict[str, Any] = {}
        for name, entry in value.items():
            entries.update(converted({name: entry}) if holds_tune_domain(entry) else {name: entry})
        return expand_space(entries)
    return value


class RunConfig(Settings):
    """A whole search, as written in one YAML file.

    Attributes:
        study: the Optuna study: its name, storage, sampler, pruner and budget.
        objective: the one metric the search optimises (or ``objectives``).
        objectives: several metrics optimised together, each a section like
            ``objective``: the search finds their Pareto front.
        train: what runs a trial: a function ``package.module:function`` called as
            ``train(params, ctx)``, a script (``{command: ...}``), an Optuna objective
            (``{optuna: ...}``) or a Ray Tune trainable (``{tune: ...}``). A dict config
            (``hpsearch.run({...})``) may hold the function itself.
        space: the parameters searched, by name: a range, a list of choices, a
            constant, or branches (``{when: ...}``); or ``module:name``, a Ray Tune
            ``param_space`` in your code (a dict, or a function of no arguments
            returning one), or a define-by-run function of a trial, as
            ``OptunaSearch(space=...)`` takes it.
        execution: where and how trials run on Ray.
        tracking: where MLflow records the runs.
        telemetry: how the GPUs are read.
        oom: what happens when a trial runs out of GPU memory.
        packing: how many trials share each GPU.
        fusion: several trials of one shape trained as one model in one worker.
    """

    study: StudySpec
    objective: ObjectiveSpec | None = None
    objectives: list[ObjectiveSpec] | None = None
    train: Annotated[
        Annotated[str, Field(pattern=TARGET_PATTERN), Tag("function")]
        | Annotated[CommandSpec, Tag("script")]
        | Annotated[OptunaObjectiveSpec, Tag("optuna")]
        | Annotated[TuneTrainableSpec, Tag("tune")],
        Discriminator(_train_kind),
    ]
    space: Annotated[dict[str, ParamSpec], BeforeValidator(_expand_space)] = Field(
        default_factory=dict
    )
    execution: ExecutionSpec = Field(default_factory=ExecutionSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec)
    oom: OomSpec = Field(default_factory=OomSpec)
    packing: PackingSpec = Field(default_factory=PackingSpec)
    fusion: FusionSpec = Field(default_factory=FusionSpec)

    _source: str = PrivateAttr(default="<config>")

    @model_validator(mode="before")
    @classmethod
    def _objective_values_named(cls, data: Any) -> Any:
        """An Optuna objective's values named where the config names none, as Optuna's
        ``MLflowCallback`` names them: ``value`` (``value_0``, ``value_1``, ... for a
        tuple), so that ``objective: {direction: maximize}`` reads as ``create_study``'s
        ``direction="maximize"``. Any other train needs the metric it reports named."""
        train = data.get("train") if isinstance(data, dict) else None
        optuna = isinstance(train, dict) and "optuna" in train
        if not (optuna or isinstance(train, OptunaObjectiveSpec)):
            return data
        named = dict(data)
        one = named.get("objective")
        if isinstance(one, dict) and "metric" not in one:
            named["objective"] = {"metric": "value", **one}
        several = named.get("objectives")
        if isinstance(several, list):
            named["objectives"] = [
                {"metric": f"value_{i}", **o} if isinstance(o, dict) and "metric" not in o else o
                for i, o in enumerate(several)
            ]
        return named

    @field_validator("space")
    @classmethod
    def _something_to_search(
        cls, space: dict[str, ParamSpec], info: ValidationInfo
    ) -> dict[str, ParamSpec]:
        searched = any(spec.type in SEARCHED_TYPES for spec in space.values())
        # An Optuna objective suggests its own parameters; anything else needs a space.
        if not searched and not isinstance(info.data.get("train"), OptunaObjectiveSpec):
            raise ValueError(
                "nothing to search: every entry is a constant; "
                "give at least one entry a range ({type: float, low: .., high: ..}) "
                "or a list of choices (or train: {optuna: mymod:objective}, which suggests its own)"
            )
        SearchSpace(space).check_conditions()
        return space

    @model_validator(mode="after")
    def _check_whole(self) -> RunConfig:
        if "space" not in self.model_fields_set and self.optuna_objective is None:
            form = self._written_for_another_form()
            if form is not None:
                raise ValueError("train: {}; {}".format(*wrong_form(self.train_target, form)))
            raise ValueError(
                "space is missing: list the parameters to search (a training function, "
                "a script or a Tune trainable takes them from it)"
            )
        if (self.objective is None) == (self.objectives is None):
            raise ValueError(
                "give exactly one of 'objective' (one metric) or 'objectives' (a list); "
                "e.g. objective: {metric: val_accuracy, direction: maximize}"
            )
        metrics = [o.name for o in self.objective_list]
        if not metrics:
            raise ValueError("objectives is empty; list at least one {metric, direction}")
        if len(set(metrics)) != len(metrics):
            raise ValueError("objectives repeats a metric; list each metric once")
        for key in ("grows_memory", "memory_neutral"):
            unknown = [n for n in getattr(self.oom, key) if n not in self.space]
            if key in self.oom.model_fields_set and unknown:
                raise ValueError(
                    f"oom.{key} names {unknown}, which are not in space; "
                    f"list parameters of the space ({', '.join(self.space)})"
                )
        if (
            self.oom.action == "retry_smaller_batch"
            and self.optuna_objective is None
            and isinstance(self.space, dict)
            and "batch_size" not in self.space
        ):
            raise ValueError(
                "oom.action: retry_smaller_batch halves the parameter batch_size, which the "
                "space does not have; add batch_size to space (each trial's micro-batch), "
                "or write action: prune"
            )
        if self.command is not None:
            self.command.check_placeholders(self.space)
        sampler = self.study.sampler
        if (
            sampler.type == "grid"
            and "search_space" not in sampler.options
            and self.optuna_objective is not None
            and not self.search_space.searched()
        ):
            raise ValueError(
                "study.sampler: grid enumerates the space, which lists no searched "
                "parameter, and an Optuna objective's suggest_* calls are known only as it "
                "runs; give the grid as Optuna's GridSampler takes it, options: "
                "{search_space: {x: [0.1, 0.5, 0.9]}}"
            )
        ends = self.study.n_trials or self.study.timeout or sampler.type == "grid"
        if not ends:  # a grid ends once each of its points has run
            raise ValueError("the search has no end; set study.n_trials or study.timeout")
        if self.study.timeout_grace is not None and self.study.timeout is None:
            raise ValueError(
                "study.timeout_grace is set without study.timeout; set study.timeout "
                "(the grace counts from it) or remove study.timeout_grace"
            )
        return self

    @model_validator(mode="after")
    def _enqueued_in_space(self) -> RunConfig:
        if self.optuna_objective is not None:  # its parameters are its suggest calls
            return self
        for index, given in enumerate(self.study.enqueue):
            try:
                self.search_space.fixed(given)
            except ValueError as exc:
                raise ValueError(f"study.enqueue[{index}]: {exc}") from None
        return self

    @property
    def enqueued(self) -> list[dict[str, Any]]:
        """``study.enqueue``'s trials as the parameter values Optuna fixes (flat names)."""
        if self.optuna_objective is not None:  # its parameters are its suggest calls
            return [flat_names(given) for given in self.study.enqueue]
        return [self.search_space.fixed(given) for given in self.study.enqueue]

    @property
    def source(self) -> str:
        """The file this config was read from (for messages)."""
        return self._source

    @property
    def train_target(self) -> str:
        """The training function, ``package.module:function``; empty for a script or objective."""
        return self.train if isinstance(self.train, str) else ""

    def _written_for_another_form(self) -> Form | None:
        """What ``train: mod:function`` is, read from its source (not run), where that is an
        Optuna objective or a Tune trainable: a space left out for that reason."""
        if not self.train_target:
            return None
        ensure_importable_from(os.getcwd())  # the user's project, as a run imports it
        form = form_in_source(self.train_target)
        return form if form is not None and form.kind != "function" else None

    @property
    def command(self) -> CommandSpec | None:
        """The training script of ``train: {command: ...}``; ``None`` for a function."""
        return self.train if isinstance(self.train, CommandSpec) else None

    @property
    def train_label(self) -> str:
        """What trains, in words: the function, the script's command, or the objective."""
        if isinstance(self.train, CommandSpec):
            return str(self.train.command)
        if isinstance(self.train, OptunaObjectiveSpec):
            return f"{self.train.optuna} (an Optuna objective)"
        if isinstance(self.train, TuneTrainableSpec):
            return f"{self.train.tune} (a Ray Tune trainable)"
        return self.train

    def how_to_report(self, metric: str) -> str:
        """How this config's trials report ``metric``: the fix when a trial never did."""
        if isinstance(self.train, CommandSpec):
            return self.train.how_to_report(metric)
        if isinstance(self.train, TuneTrainableSpec):
            return f'report it with tune.report({{"{metric}": ...}})'
        if isinstance(self.train, OptunaObjectiveSpec):
            return "return its value from the objective"
        return f"report it with ctx.report(step, {metric}=...)"

    @property
    def tune_trainable(self) -> str | None:
        """The Ray Tune trainable of ``train: {tune: ...}``; ``None`` for anything else."""
        return self.train.tune if isinstance(self.train, TuneTrainableSpec) else None

    @property
    def tune_settings(self) -> TuneTrainableSpec | None:
        """The whole ``train: {tune: ...}`` section (its ``stop`` and checkpoints too)."""
        return self.train if isinstance(self.train, TuneTrainableSpec) else None

    @property
    def optuna_objective(self) -> str | None:
        """The Optuna objective of ``train: {optuna: ...}``; ``None`` for anything else."""
        return self.train.optuna if isinstance(self.train, OptunaObjectiveSpec) else None

    @property
    def objective_list(self) -> list[ObjectiveSpec]:
        """The objectives as a list, whichever of ``objective``/``objectives`` was written."""
        if self.objective is not None:
            return [self.objective]
        return list(self.objectives or [])

    @property
    def packing_in_effect(self) -> PackingSpec | None:
        """The packing that applies; ``None``: trials on CPU only (``trials_per_gpu: 0``)."""
        return None if self.packing.cpu_only else self.packing

    @property
    def search_space(self) -> SearchSpace:
        """The ``space`` section as a :class:`SearchSpace`."""
        return SearchSpace(self.space)

    @property
    def experiment_name(self) -> str:
        """MLflow experiment name: ``tracking.experiment``, else the study name."""
        return self.tracking.experiment or self.study.name

    def with_overrides(
        self,
        *,
        n_trials: int | None = None,
        timeout: float | None = None,
        address: str | None = None,
        simulate: SimulatedSpec | None = None,
        allow_space_change: bool = False,
    ) -> RunConfig:
        """A copy with command-line overrides applied (``None`` keeps the file's value).

        ``simulate`` switches telemetry to the given simulated GPUs.
        """
        study_update: dict[str, Any] = {}
        if n_trials is not None:
            study_update["n_trials"] = n_trials
        if timeout is not None:
            study_update["timeout"] = timeout
        if allow_space_change:
            study_update["allow_space_change"] = True
        update: dict[str, Any] = {}
        if study_update:
            update["study"] = self.study.model_copy(update=study_update)
        if address is not None:
            update["execution"] = self.execution.model_copy(update={"address": address})
        if simulate is not None:
            update["telemetry"] = self.telemetry.model_copy(
                update={"backend": "simulated", "simulated": simulate}
            )
        copy = self.model_copy(update=update)
        copy._source = self._source
        return copy
