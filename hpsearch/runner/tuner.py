"""Running the trials of a search as Ray Tune trials."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.execution.placement_groups import PlacementGroupFactory
from ray.tune.experiment import Trial

from hpsearch.runner.adapters import AdmissionSearcher, RecorderCallback
from hpsearch.trial.protocol import SPEC_KEY, TrialSpec
from hpsearch.trial.worker import run_trial

_MAX_PENDING = "TUNE_MAX_PENDING_TRIALS_PG"
NODE_ID_LABEL = "ray.io/node-id"
"""The label every Ray node carries with its id (placement groups select on it)."""
NODE_PIN = 0.001
"""Amount of a node's ``node:<address>`` resource a placed trial asks for, per GPU index + 1."""


def trial_resources(config: dict[str, Any]) -> PlacementGroupFactory:
    """Ray's resource request for one trial, read from the spec the searcher put in its config.

    Tune calls this on a deserialized copy in the driver when the trial is
    created; state changed after registration would not reach it, but each
    trial's own config does.
    """
    spec = TrialSpec.from_dict(config[SPEC_KEY])
    bundle = {"CPU": spec.cpus}
    gpus = spec.ray_gpus if spec.ray_gpus is not None else spec.gpus
    if gpus > 0:
        bundle["GPU"] = gpus
    if spec.node is None or spec.gpu_index is None:
        return PlacementGroupFactory([bundle])
    if spec.node_address:
        # The amount names the GPU, so Tune reuses a worker only for trials of the
        # same GPU (a process keeps the GPU CUDA first saw); 1000 trials fit in 1.0.
        bundle[f"node:{spec.node_address}"] = NODE_PIN * (spec.gpu_index + 1)
    # Pinned to the node of the GPU the packing policy chose, by node id: several
    # nodes may share an address (raylets of one machine).
    return PlacementGroupFactory([bundle], bundle_label_selector=[{NODE_ID_LABEL: spec.node}])


def _trial_name(trial: Trial) -> str:
    return f"trial_{trial.config[SPEC_KEY]['number']}"


def run_trials(
    searcher: AdmissionSearcher,
    callback: RecorderCallback,
    *,
    storage_path: Path,
    experiment: str,
    reuse_workers: bool,
    max_pending: int,
) -> None:
    """Run Tune until the searcher says the search is finished.

    Args:
        searcher: creates trials when the policy and budget allow.
        callback: records what happens to them.
        storage_path: where Tune keeps its trial folders and logs.
        experiment: Tune's experiment folder name.
        reuse_workers: keep worker processes between trials of the same shape.
        max_pending: how many trials may be starting at once (the most that can run).
    """
    tuner = tune.Tuner(
        tune.with_resources(run_trial, trial_resources),
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            num_samples=-1,
            reuse_actors=reuse_workers,
            trial_name_creator=_trial_name,
            trial_dirname_creator=_trial_name,
        ),
        run_config=tune.RunConfig(
            name=experiment,
            storage_path=str(storage_path.resolve()),
            verbose=0,
            callbacks=[callback],
            log_to_file=True,
            failure_config=tune.FailureConfig(max_failures=0),
        ),
    )
    # With a custom searcher Tune lets one trial start at a time; trials of a
    # packed GPU must be able to start together. Tune reads this when fit() starts.
    previous = os.environ.get(_MAX_PENDING)
    os.environ[_MAX_PENDING] = str(max(1, max_pending))
    try:
        tuner.fit()
    finally:
        if previous is None:
            os.environ.pop(_MAX_PENDING, None)
        else:
            os.environ[_MAX_PENDING] = previous
