"""A trial whose Ray node dies runs again, on another node, from its last checkpoint."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpsearch import attrs
from tests.cluster.conftest import RayNodes, ray_node_env
from tests.conftest import REPO_ROOT, wait_for
from tests.faults.conftest import Drivers, record_figures, study_trials

pytestmark = pytest.mark.process


@pytest.fixture
def nodes() -> Iterator[RayNodes]:
    """A head with no CPUs (trials run on worker nodes), token-authenticated, on 127.0.0.1.

    The head notices a silent node within about 3 s rather than Ray's default 15.
    """
    env = ray_node_env(RAY_health_check_period_ms="1000", RAY_health_check_failure_threshold="3")
    cluster = RayNodes(env)
    cluster.head("--num-cpus=0")
    try:
        yield cluster
    finally:
        cluster.kill_all()


def test_a_trial_whose_node_dies_resumes_on_another_node_from_its_checkpoint(
    project: Path, nodes: RayNodes, drivers: Drivers
) -> None:
    shutil.copytree(REPO_ROOT / "examples", project / "examples")
    config = (REPO_ROOT / "examples/conditional/config.yaml").read_text()
    config = config.replace("n_trials: 12", "n_trials: 1").replace(
        "execution: {max_concurrent: 2}",
        f"execution: {{address: '127.0.0.1:{nodes.port}', max_concurrent: 1}}",
    )
    # 16 epochs of 0.5 s: the node is killed well before the trial's last checkpoint,
    # however late a loaded machine sees its second (with 8, one killed after the
    # last resumed with nothing left to report).
    config = config.replace("epochs: 8", "epochs: 16")
    assert "epochs: 16" in config
    (project / "config.yaml").write_text(config)
    first = nodes.worker("--num-cpus=2")
    started = time.monotonic()
    driver = drivers.start(project / "config.yaml", env=nodes.env)
    latest = project / "mlruns/checkpoints/conditional-example/trial-0/LATEST"

    def checkpointed_twice() -> bool:
        return latest.is_file() and not latest.read_text().startswith("step-0/")

    wait_for(checkpointed_twice, 240, "trial 0's second checkpoint", process=driver)
    nodes.kill(first)  # the machine is gone: raylet, workers, the trial
    nodes.worker("--num-cpus=2")
    _, stderr = driver.communicate(timeout=180)
    took = time.monotonic() - started

    assert driver.returncode == 0, stderr[-3000:]
    lost, again = study_trials("conditional-example", while_running=False)
    assert lost.user_attrs[attrs.OUTCOME] == "interrupted"
    assert lost.user_attrs[attrs.ERROR].startswith("its node was lost")
    # Ray's own word, or, where Ray called the actor unreachable first, its node table's.
    said = lost.user_attrs[attrs.ERROR]
    assert "because its node has died" in said or "was dead by then" in said
    assert again.state.name == "COMPLETE"
    assert again.user_attrs[attrs.RETRY_OF] == lost.number
    assert again.user_attrs[attrs.SEED] == lost.user_attrs[attrs.SEED]
    assert again.user_attrs[attrs.METRICS]["resumed_at"] >= 2  # after a checkpoint, not 0
    record_figures(fault="a trial's Ray node killed (SIGKILL)", took_s=round(took, 1))
