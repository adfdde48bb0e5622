"""The Ray Tune trainable that runs one launch in a Ray worker, and what each launch asks of Ray."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from ray.tune.execution.placement_groups import PlacementGroupFactory

from hpsearch.pruning import ray_board_lookup, verdict_oracle
from hpsearch.runner._mps import use_mps
from hpsearch.runner._tune_dicts import launch_of, tune_result
from hpsearch.telemetry import names_mig
from hpsearch.trial.context import PruneOracle
from hpsearch.trial.death import captured_output
from hpsearch.trial.protocol import Assignment, WorkerEvent
from hpsearch.worker import execute_group, execute_trial, hang_limit, time_limit, use_gpu

NODE_ID_LABEL = "ray.io/node-id"
"""The label every Ray node carries with its id (placement groups select on it)."""
NODE_PIN = 0.001
"""Amount of a node's ``node:<address>`` resource a placed trial asks for, per GPU index + 1."""


def run_trial(config: dict[str, Any]) -> None:
    """Tune's function trainable: run the launch, each event a ``tune.report``."""
    import ray
    from ray import tune

    launch = launch_of(config)
    assigned = _assignment(ray)
    index = launch.admission.gpu_index
    # A MIG instance Ray gave the worker is a slice the policy's GPU numbers cannot
    # name: pointed at its whole GPU, the trial would run on another slice, or on none.
    if index is not None and not names_mig(os.environ.get("CUDA_VISIBLE_DEVICES")):
        assigned = use_gpu(index, assigned)
        assigned = replace(assigned, mps_client=use_mps(launch.settings.worker_dir, index))

    def send(event: WorkerEvent) -> None:
        heard()
        tune.report(tune_result(event))

    oracle_for = None
    if launch.settings.decision_board:
        lookup = ray_board_lookup(launch.settings.decision_board)

        def oracle_for(number: int) -> PruneOracle:
            return verdict_oracle(number, lookup)

    first = launch.members[0].number
    with (
        captured_output(launch.stdout_file, launch.stderr_file),
        time_limit(launch.settings.timeout_s, first),
        # A script's runner only waits on the script: the script's processes work.
        hang_limit(
            launch.settings.hang_s, first, caller_works=launch.settings.command is None
        ) as heard,
    ):
        if len(launch.members) > 1:
            for end in execute_group(launch, assigned=assigned, send=send, oracle_for=oracle_for):
                send(end)
            return
        oracle = oracle_for(first) if oracle_for is not None else None
        send(execute_trial(launch, assigned=assigned, send=send, oracle=oracle))


def trial_resources(config: dict[str, Any]) -> PlacementGroupFactory:
    """Ray's resource request for one launch, read from the launch in its config.

    Tune calls this on a deserialized copy in the driver when the trial is
    created; state changed after registration would not reach it, but each
    trial's own config does.
    """
    launch = launch_of(config)
    admission = launch.admission
    bundle = {"CPU": admission.cpus}
    if launch.ray_gpus > 0:
        bundle["GPU"] = launch.ray_gpus
    if admission.node is None or admission.gpu_index is None:
        return PlacementGroupFactory([bundle])
    if admission.node_address:
        # The amount names the GPU, so Tune reuses a worker only for trials of the
        # same GPU (a process keeps the GPU CUDA first saw); 1000 trials fit in 1.0.
        bundle[f"node:{admission.node_address}"] = NODE_PIN * (admission.gpu_index + 1)
    # Pinned to the node of the GPU the packing policy chose, by node id: several
    # nodes may share an address (raylets of one machine).
    return PlacementGroupFactory([bundle], bundle_label_selector=[{NODE_ID_LABEL: admission.node}])


def _assignment(ray: Any) -> Assignment:
    """What Ray assigned this worker: CPUs, GPUs and their ids, its node, its process."""
    context = ray.get_runtime_context()
    resources = context.get_assigned_resources()
    return Assignment(
        cpus=float(resources["CPU"]) if "CPU" in resources else None,
        gpus=float(resources["GPU"]) if "GPU" in resources else None,
        gpu_ids=tuple(str(i) for i in ray.get_gpu_ids()),
        node_id=context.get_node_id(),
        pid=os.getpid(),
    )
