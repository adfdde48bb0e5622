"""Config files: strict YAML into a typed :class:`RunConfig`.

The sections other packages read are declared there and composed here:
``packing`` is :class:`hpsearch.placement.PackingSpec`, ``oom``
:class:`hpsearch.oom.OomSpec`, ``telemetry.simulated``
:class:`hpsearch.simulation.SimulatedSpec`, a script's ``train``
:class:`hpsearch.trial.script.CommandSpec`.
"""

from hpsearch.config._json_schema import config_schema
from hpsearch.config._load import NNI_EXPERIMENT_KEYS, load_config
from hpsearch.config._schema import (
    DEFAULT_ARTIFACT_LOCATION,
    DEFAULT_STUDY_STORAGE,
    DEFAULT_TRACKING_URI,
    MEMORY_STORAGE,
    ConfigKeyWarning,
    ExecutionSpec,
    ObjectiveSpec,
    PrunerSpec,
    RunConfig,
    SamplerSpec,
    StudySpec,
    TargetSpec,
    TelemetrySpec,
    TrackingSpec,
)

__all__ = [
    "DEFAULT_ARTIFACT_LOCATION",
    "DEFAULT_STUDY_STORAGE",
    "DEFAULT_TRACKING_URI",
    "MEMORY_STORAGE",
    "NNI_EXPERIMENT_KEYS",
    "ConfigKeyWarning",
    "ExecutionSpec",
    "ObjectiveSpec",
    "PrunerSpec",
    "RunConfig",
    "SamplerSpec",
    "StudySpec",
    "TargetSpec",
    "TelemetrySpec",
    "TrackingSpec",
    "config_schema",
    "load_config",
]
