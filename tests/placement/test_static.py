"""The static resource policy: pure, no Ray."""

from __future__ import annotations

import pytest

from hpsearch.placement import ClusterCapacity, RunningTrial, StaticPolicy

ONE_GPU = ClusterCapacity(cpus=8, gpus=1)
NO_GPU = ClusterCapacity(cpus=2, gpus=0)


def _running(*gpus: float, cpus: float = 1.0) -> list[RunningTrial]:
    return [RunningTrial(number=i, cpus=cpus, gpus=g) for i, g in enumerate(gpus)]


def test_cpu_only_concurrency_is_bounded_by_cpus() -> None:
    policy = StaticPolicy(cpus_per_trial=1)
    first = policy.admit([], NO_GPU)
    assert first is not None
    assert (first.cpus, first.gpus) == (1, 0)
    assert policy.admit(_running(0.0), NO_GPU) is not None
    assert policy.admit(_running(0.0, 0.0), NO_GPU) is None


def test_trials_per_gpu_sets_the_fraction_and_the_count() -> None:
    policy = StaticPolicy(trials_per_gpu=4)
    admission = policy.admit([], ONE_GPU)
    assert admission is not None
    assert admission.gpus == 0.25
    assert "4 trial(s) per GPU" in admission.reason
    assert policy.admit(_running(0.25, 0.25, 0.25), ONE_GPU) is not None
    assert policy.admit(_running(0.25, 0.25, 0.25, 0.25), ONE_GPU) is None


def test_max_concurrent_caps() -> None:
    policy = StaticPolicy(trials_per_gpu=4, max_concurrent=2)
    assert policy.admit(_running(0.25, 0.25), ONE_GPU) is None


def test_zero_trials_per_gpu_runs_on_cpu() -> None:
    admission = StaticPolicy(trials_per_gpu=0).admit([], ONE_GPU)
    assert admission is not None
    assert admission.gpus == 0


def test_change_takes_effect_for_the_next_trial_once_it_fits() -> None:
    policy = StaticPolicy(trials_per_gpu=1)
    assert policy.admit(_running(1.0), ONE_GPU) is None
    policy.trials_per_gpu = 2
    # The trial admitted under the old answer still holds the whole GPU.
    assert policy.admit(_running(1.0), ONE_GPU) is None
    admission = policy.admit(_running(0.5), ONE_GPU)
    assert admission is not None
    assert admission.gpus == 0.5


def test_cpus_held_by_running_trials_count() -> None:
    policy = StaticPolicy(cpus_per_trial=2)
    assert policy.admit(_running(0.0, cpus=3), ClusterCapacity(cpus=4, gpus=0)) is None


@pytest.mark.parametrize(
    "kwargs", [{"cpus_per_trial": 0}, {"trials_per_gpu": -1}, {"max_concurrent": 0}]
)
def test_invalid_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each message is specific; any is fine here
        StaticPolicy(**kwargs)  # type: ignore[arg-type]
