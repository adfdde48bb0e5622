"""Config files: strict YAML into a typed :class:`RunConfig`."""

from hpsearch.config._load import load_config
from hpsearch.config._schema import (
    DEFAULT_ARTIFACT_LOCATION,
    DEFAULT_STUDY_STORAGE,
    DEFAULT_TRACKING_URI,
    CommandSpec,
    ExecutionSpec,
    ObjectiveSpec,
    OomSpec,
    PackingSpec,
    PrunerSpec,
    RunConfig,
    SamplerSpec,
    SharingSpec,
    SimulatedSpec,
    StudySpec,
    TelemetrySpec,
    TrackingSpec,
    parse_simulate,
)

__all__ = [
    "DEFAULT_ARTIFACT_LOCATION",
    "DEFAULT_STUDY_STORAGE",
    "DEFAULT_TRACKING_URI",
    "CommandSpec",
    "ExecutionSpec",
    "ObjectiveSpec",
    "OomSpec",
    "PackingSpec",
    "PrunerSpec",
    "RunConfig",
    "SamplerSpec",
    "SharingSpec",
    "SimulatedSpec",
    "StudySpec",
    "TelemetrySpec",
    "TrackingSpec",
    "load_config",
    "parse_simulate",
]
