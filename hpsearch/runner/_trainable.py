"""The Ray Tune trainable that runs one trial in a Ray worker, and what each trial asks of Ray."""

from __future__ import annotations

from typing import Any

from ray.tune.execution.placement_groups import PlacementGroupFactory

from hpsearch.pruning import ray_board_lookup, verdict_oracle
from hpsearch.trial.death import captured_output
from hpsearch.trial.protocol import PARAMS_KEY, SPEC_KEY, Assignment, TrialSpec, WorkerEvent
from hpsearch.trial.worker import execute_trial, time_limit, use_gpu

NODE_ID_LABEL = "ray.io/node-id"
"""The label every Ray node carries with its id (placement groups select on it)."""
NODE_PIN = 0.001
"""Amount of a node's ``node:<address>`` resource a placed trial asks for, per GPU index + 1."""


def run_trial(config: dict[str, Any]) -> None:
    """Tune's function trainable: run the trial, each event a ``tune.report``."""
    import ray
    from ray import tune

    spec = TrialSpec.from_dict(config[SPEC_KEY])
    assigned = _assignment(ray)
    if spec.gpu_index is not None:
        assigned = use_gpu(spec.gpu_index, assigned)

    def send(event: WorkerEvent) -> None:
        tune.report(event.to_result())

    oracle = None
    if spec.decision_board:
        oracle = verdict_oracle(spec.number, ray_board_lookup(spec.decision_board))
    with (
        captured_output(spec.stdout_file, spec.stderr_file),
        time_limit(spec.timeout_s, spec.number),
    ):
        end = execute_trial(
            spec, dict(config[PARAMS_KEY]), assigned=assigned, send=send, oracle=oracle
        )
        send(end)


def trial_resources(config: dict[str, Any]) -> PlacementGroupFactory:
    """Ray's resource request for one trial, read from the spec the scheduler put in its config.

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


def _assignment(ray: Any) -> Assignment:
    """What Ray assigned this worker: CPUs, GPUs and their ids, its node, its process."""
    import os

    context = ray.get_runtime_context()
    resources = context.get_assigned_resources()
    return Assignment(
        cpus=float(resources["CPU"]) if "CPU" in resources else None,
        gpus=float(resources["GPU"]) if "GPU" in resources else None,
        gpu_ids=tuple(str(i) for i in ray.get_gpu_ids()),
        node_id=context.get_node_id(),
        pid=os.getpid(),
    )
