"""What Ray is asked for per trial: CPUs, a GPU amount, and the node of the GPU it is placed on."""

from __future__ import annotations

import pytest
from ray.tune.execution.placement_groups import PlacementGroupFactory

from hpsearch.errors import ConfigError
from hpsearch.placement import Admission
from hpsearch.runner._trainable import trial_resources
from hpsearch.runner._tune_dicts import launch_of, tune_config
from tests.conftest import ConfigWriter
from tests.harness import make_launch


def _config(
    gpu_index: int | None = None,
    node: str | None = None,
    node_address: str | None = None,
    ray_gpus: float | None = None,
) -> dict[str, object]:
    admission = Admission(
        cpus=2.0,
        gpus=0.25,
        reason="test",
        gpu_index=gpu_index,
        node=node,
        node_address=node_address,
        ray_gpus=ray_gpus,
    )
    launch = make_launch({"x": 1.5, "name": "a"}, train="m:f", admission=admission)
    config = tune_config(launch)
    assert launch_of(config) == launch  # through Tune's config and back, whole
    return config


def test_a_trial_ray_places_asks_for_its_share() -> None:
    assert trial_resources(_config()).required_resources == {"CPU": 2.0, "GPU": 0.25}


def test_a_placed_trial_is_pinned_to_its_node_and_asks_ray_for_bookkeeping_only() -> None:
    request = trial_resources(
        _config(gpu_index=2, node="ab12", node_address="10.0.0.2", ray_gpus=0.125)
    )
    # By node id (nodes may share an address), and the node's address for the GPU's index.
    assert request == PlacementGroupFactory(
        [{"CPU": 2.0, "GPU": 0.125, "node:10.0.0.2": 0.003}],
        bundle_label_selector=[{"ray.io/node-id": "ab12"}],
    )


def test_trials_on_different_gpus_never_share_a_reused_worker() -> None:
    # Tune reuses a worker only for an equal request; a worker keeps the GPU CUDA saw first.
    on_gpu0, on_gpu1, again_gpu0 = (
        trial_resources(_config(gpu_index=i, node="ab12", node_address="10.0.0.2", ray_gpus=0.125))
        for i in (0, 1, 0)
    )
    assert on_gpu0 != on_gpu1
    assert on_gpu0 == again_gpu0


def test_trials_that_ask_more_cpus_than_the_ray_they_would_run_on_are_refused_first(
    write_config: ConfigWriter,
) -> None:
    from hpsearch.config import load_config
    from hpsearch.runner import RayTuneRunner

    runner = RayTuneRunner()
    runner.check(load_config(write_config({"execution": {"cpus_per_trial": 1}})))
    # Ray would hold each trial back for ever: the search would wait with nothing running.
    greedy = load_config(write_config({"execution": {"cpus_per_trial": 4096}}))
    with pytest.raises(ConfigError) as refused:
        runner.check(greedy)
    said = str(refused.value)
    assert said.startswith(f"{greedy.source}: execution.cpus_per_trial: a trial asks 4096 CPUs")
    assert "so no trial would ever start; set it to at most " in said
    # A cluster joined by address may gain a node that fits (Ray's autoscaler).
    runner.check(
        load_config(write_config({"execution": {"cpus_per_trial": 4096, "address": "auto"}}))
    )
