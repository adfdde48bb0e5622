"""The typed shape of a config file. Every section rejects keys it does not know."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    field_validator,
    model_validator,
)

from hpsearch.space import SEARCHED_TYPES, ParamSpec, SearchSpace, expand_shorthand

DEFAULT_STUDY_STORAGE = "sqlite:///mlruns/optuna.db"
DEFAULT_TRACKING_URI = "sqlite:///mlruns/mlflow.db"
DEFAULT_ARTIFACT_LOCATION = "mlruns/artifacts"

_DURATION = re.compile(
    r"^\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*$"
)


def _parse_duration(value: Any) -> Any:
    """Accept seconds as a number, or a string such as ``"90s"``, ``"15m"``, ``"1h30m"``."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if not value.strip() or match is None or not any(match.groups()):
            raise ValueError(
                f"cannot read {value!r} as a duration; write seconds or e.g. '15m', '1h30m'"
            )
        hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
        return hours * 3600 + minutes * 60 + seconds
    return value


Seconds = Annotated[PositiveFloat, BeforeValidator(_parse_duration)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ObjectiveSpec(_Section):
    """One metric the search optimises: its name as reported by the trial, and a direction."""

    metric: str = Field(min_length=1)
    direction: Literal["maximize", "minimize"]


class SamplerSpec(_Section):
    """Which Optuna sampler decides what to try. ``options`` go to its constructor."""

    type: Literal["tpe", "random", "nsga2", "gp"] = "tpe"
    seed: int | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class PrunerSpec(_Section):
    """Which Optuna pruner stops unpromising trials early. ``options`` go to its constructor."""

    type: Literal["none", "median", "percentile", "successive_halving", "hyperband"] = "none"
    options: dict[str, Any] = Field(default_factory=dict)


class StudySpec(_Section):
    """The Optuna study: its name, storage, sampler, pruner and budget."""

    name: str = Field(min_length=1)
    storage: str = DEFAULT_STUDY_STORAGE
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    pruner: PrunerSpec = Field(default_factory=PrunerSpec)
    n_trials: PositiveInt | None = None
    timeout: Seconds | None = None


class ExecutionSpec(_Section):
    """Where and how trials run on Ray.

    Attributes:
        address: an existing Ray cluster to join (``auto``, ``ray://…`` or ``host:port``);
            none starts a local Ray bound to 127.0.0.1 for the duration of the run.
        max_concurrent: most trials at once; none lets the resources decide.
        cpus_per_trial: CPUs Ray reserves for each trial.
        trials_per_gpu: trials sharing one GPU (each gets ``1/N`` of it); 0 runs on CPU only.
        num_cpus, num_gpus: resources of the local Ray (ignored with ``address``);
            ``num_gpus`` declares logical GPUs, useful to test placement without one.
        reuse_workers: keep trial worker processes between trials of the same shape,
            which saves Ray's worker start-up (3.8 s against 0.48 s of overhead per
            trial in scripts/bench_overhead.py on 2 CPUs).
        runtime_env: Ray runtime environment for the job (e.g. ``working_dir``, ``pip``).
    """

    address: str | None = None
    max_concurrent: PositiveInt | None = None
    cpus_per_trial: PositiveFloat = 1.0
    trials_per_gpu: int = Field(default=1, ge=0)
    num_cpus: PositiveInt | None = None
    num_gpus: int | None = Field(default=None, ge=0)
    reuse_workers: bool = True
    runtime_env: dict[str, Any] = Field(default_factory=dict)


class TrackingSpec(_Section):
    """Where MLflow records runs. The experiment defaults to the study name."""

    uri: str = DEFAULT_TRACKING_URI
    experiment: str | None = None
    artifact_location: str = DEFAULT_ARTIFACT_LOCATION


def _expand_space(value: Any) -> Any:
    if isinstance(value, dict):
        return {name: expand_shorthand(entry) for name, entry in value.items()}
    return value


class RunConfig(_Section):
    """A whole search, as written in one YAML file."""

    study: StudySpec
    objective: ObjectiveSpec | None = None
    objectives: list[ObjectiveSpec] | None = None
    train: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    space: Annotated[dict[str, ParamSpec], BeforeValidator(_expand_space)]
    execution: ExecutionSpec = Field(default_factory=ExecutionSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)

    _source: str = PrivateAttr(default="<config>")

    @field_validator("space")
    @classmethod
    def _something_to_search(cls, space: dict[str, ParamSpec]) -> dict[str, ParamSpec]:
        if not any(spec.type in SEARCHED_TYPES for spec in space.values()):
            raise ValueError(
                "nothing to search: every entry is a constant; "
                "give at least one entry a range ({type: float, low: .., high: ..}) "
                "or a list of choices"
            )
        return space

    @model_validator(mode="after")
    def _check_whole(self) -> RunConfig:
        if (self.objective is None) == (self.objectives is None):
            raise ValueError(
                "give exactly one of 'objective' (one metric) or 'objectives' (a list); "
                "e.g. objective: {metric: val_accuracy, direction: maximize}"
            )
        metrics = [o.metric for o in self.objective_list]
        if not metrics:
            raise ValueError("objectives is empty; list at least one {metric, direction}")
        if len(set(metrics)) != len(metrics):
            raise ValueError("objectives repeats a metric; list each metric once")
        if self.study.n_trials is None and self.study.timeout is None:
            raise ValueError("the search has no end; set study.n_trials or study.timeout")
        if len(metrics) > 1 and self.study.pruner.type != "none":
            raise ValueError(
                "Optuna pruners work with one objective only; "
                "set study.pruner.type: none or use a single objective"
            )
        return self

    @property
    def source(self) -> str:
        """The file this config was read from (for messages)."""
        return self._source

    @property
    def objective_list(self) -> list[ObjectiveSpec]:
        """The objectives as a list, whichever of ``objective``/``objectives`` was written."""
        if self.objective is not None:
            return [self.objective]
        return list(self.objectives or [])

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
    ) -> RunConfig:
        """A copy with command-line overrides applied (``None`` keeps the file's value)."""
        study_update: dict[str, Any] = {}
        if n_trials is not None:
            study_update["n_trials"] = n_trials
        if timeout is not None:
            study_update["timeout"] = timeout
        update: dict[str, Any] = {}
        if study_update:
            update["study"] = self.study.model_copy(update=study_update)
        if address is not None:
            update["execution"] = self.execution.model_copy(update={"address": address})
        copy = self.model_copy(update=update)
        copy._source = self._source
        return copy
