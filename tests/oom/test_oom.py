"""Out-of-memory recognition and prediction: pure, no Ray, no GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hpsearch.oom import (
    BatchRetry,
    MeasuredConfigs,
    OomCase,
    OomPredictor,
    OomSpec,
    cgroup_oom_kills,
    device_oom,
    host_oom_evidence,
    is_device_oom_message,
    is_library_alloc_failure,
    is_torch_oom,
    retry_smaller,
)


def test_torch_out_of_memory_error() -> None:
    error = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert is_torch_oom(error)
    assert device_oom(error) == "torch"
    assert not is_torch_oom(RuntimeError("CUDA out of memory"))


@pytest.mark.parametrize(
    "message",
    [
        "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 5.80 GiB total capacity)",
        "HIP out of memory. Tried to allocate 1.00 GiB",
        "cuda Out Of Memory",
    ],
)
def test_runtime_errors_that_say_out_of_memory(message: str) -> None:
    assert is_device_oom_message(RuntimeError(message))
    assert device_oom(RuntimeError(message)) == "message"
    assert not is_device_oom_message(ValueError(message))  # only RuntimeErrors


@pytest.mark.parametrize(
    "message",
    [
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "cuDNN error: CUDNN_STATUS_NOT_ENOUGH_MEMORY",
    ],
)
def test_library_allocation_failures(message: str) -> None:
    assert is_library_alloc_failure(RuntimeError(message))
    assert device_oom(RuntimeError(message)) == "library"


def test_other_errors_are_not_oom() -> None:
    assert device_oom(RuntimeError("CUDA error: device-side assert triggered")) is None
    assert device_oom(ValueError("shapes do not match")) is None
    assert device_oom(MemoryError()) is None  # host memory inside Python: a plain failure


def _wrapped_oom() -> None:
    try:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")
    except RuntimeError as inner:
        raise ValueError("training step failed") from inner


def test_an_oom_re_raised_by_user_code_is_found_through_its_cause() -> None:
    with pytest.raises(ValueError, match="training step failed") as info:
        _wrapped_oom()
    assert device_oom(info.value) == "torch"


def test_host_oom_needs_evidence() -> None:
    ray_text = (
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."
    )
    assert "Ray reported host memory exhaustion" in host_oom_evidence(ray_text, None, None)
    killed = "The actor died unexpectedly: worker exited with SIGKILL"
    assert host_oom_evidence(killed, 3, 4).startswith("worker killed by SIGKILL")
    assert host_oom_evidence(killed, 3, 3) == ""  # no kernel OOM kill meanwhile
    assert host_oom_evidence(killed, None, None) == ""  # no counter to read
    assert host_oom_evidence("ValueError: bad input", 3, 9) == ""
    # Ray's word for every worker that died silently lists the OOM killer as a possible
    # cause: not evidence. The reaper's signal and the cgroup's count are.
    silent = (
        "Worker unexpectedly exits with a connection error code 2. End of file. Some common "
        "causes include: (1) the process was killed by the OOM killer due to high memory usage"
    )
    assert host_oom_evidence(f"exit code 3\n{silent}", 3, 3) == ""
    assert host_oom_evidence(f"killed by signal 9 (SIGKILL)\n{silent}", 3, 3) == ""
    assert host_oom_evidence(f"killed by signal 9 (SIGKILL)\n{silent}", 3, 4) != ""


def test_cgroup_counter(tmp_path: Path) -> None:
    events = tmp_path / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\n")
    control = tmp_path / "memory.oom_control"  # cgroup v1
    control.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    missing = tmp_path / "missing"
    assert cgroup_oom_kills([events, control]) == 2
    assert cgroup_oom_kills([missing, control]) == 5
    assert cgroup_oom_kills([missing]) is None


def test_predictor_compares_growing_parameters_only() -> None:
    predictor = OomPredictor(["batch_size", "width"])
    ran_out = {"batch_size": 256, "width": 1024, "lr": 0.01, "act": "relu"}
    predictor.add(OomCase(3, ran_out))
    assert predictor.predict(ran_out) is not None
    bigger = {**ran_out, "batch_size": 512, "width": 2048}
    case = predictor.predict(bigger)
    assert case is not None
    assert case.number == 3
    assert predictor.predict({**ran_out, "batch_size": 128}) is None  # smaller: may fit
    assert predictor.predict({**ran_out, "lr": 0.02}) is None  # another parameter differs
    assert predictor.predict({**ran_out, "act": "gelu"}) is None
    assert predictor.predict({k: v for k, v in ran_out.items() if k != "act"}) is None


def test_memory_neutral_parameters_are_not_compared() -> None:
    predictor = OomPredictor(["batch_size"], memory_neutral=["lr"])
    predictor.add(OomCase(0, {"batch_size": 256, "lr": 0.01, "act": "relu"}))
    assert predictor.predict({"batch_size": 256, "lr": 0.003, "act": "relu"}) is not None
    assert predictor.predict({"batch_size": 256, "lr": 0.003, "act": "gelu"}) is None


def test_predictor_respects_memory_caps() -> None:
    predictor = OomPredictor(["batch_size"])
    predictor.add(OomCase(1, {"batch_size": 64}, memory_cap_mb=3000.0))
    # It ran out with 3000 MiB: with a whole GPU it may fit, with less it will not.
    assert predictor.predict({"batch_size": 64}) is None
    assert predictor.predict({"batch_size": 64}, memory_cap_mb=2000.0) is not None
    predictor.add(OomCase(2, {"batch_size": 128}))  # ran out on a whole GPU
    assert predictor.predict({"batch_size": 256}, memory_cap_mb=1500.0) is not None


def test_a_configuration_larger_than_any_measured_is_a_new_kind() -> None:
    seen = MeasuredConfigs(["batch_size", "width"])
    assert not seen.covers({"batch_size": 64, "width": 256, "lr": 0.01})
    seen.add({"batch_size": 128, "width": 512, "lr": 0.01})
    # Smaller or equal in every memory-growing parameter: known, whatever the lr.
    assert seen.covers({"batch_size": 64, "width": 512, "lr": 0.3})
    assert not seen.covers({"batch_size": 256, "width": 256, "lr": 0.01})
    assert not seen.covers({"batch_size": 64, "width": 1024, "lr": 0.01})


def test_memory_needs_learn_from_peaks_and_from_caps_run_out_under() -> None:
    from hpsearch.oom import MemoryNeeds

    needs = MemoryNeeds(["batch_size", "width"], memory_neutral=["lr"])
    needs.ran(3, {"batch_size": 64, "width": 512, "lr": 0.1}, peak_mb=900.0)
    needs.ran_out(7, {"batch_size": 64, "width": 8192, "lr": 0.1}, cap_mb=3070.0)
    small = {"batch_size": 32, "width": 512, "lr": 0.5}
    larger = {"batch_size": 128, "width": 8192, "lr": 0.01}
    # Nothing known that the small one is at least as large as.
    assert needs.beyond(small, 500.0) is None
    # At least as large as trial 3 (900 MiB), and than trial 7, which needs more than 3070.
    assert needs.beyond(larger, 3070.0) == (3070.0, 7)
    assert needs.beyond(larger, 6000.0) is None
    assert needs.beyond({"batch_size": 64, "width": 512, "lr": 0.3}, 800.0) == (900.0, 3)
    assert needs.beyond({"batch_size": 64, "width": 512, "lr": 0.3}, 900.0) is None


def test_a_smaller_batch_is_tried_down_to_the_smallest_the_config_allows() -> None:
    spec = OomSpec(action="retry_smaller_batch", max_halvings=4, min_batch_size=32)
    first = retry_smaller({"batch_size": 128}, spec, (), step=0)
    assert first is not None
    smaller, retry = first
    assert smaller == {"batch_size": 64, "grad_accum_steps": 2}
    assert retry == BatchRetry(0, 128, 64, 2)
    second = retry_smaller(smaller, spec, (retry,), step=0)
    assert second is not None
    assert second[0]["batch_size"] == 32
    assert retry_smaller(second[0], spec, (retry, second[1]), step=0) is None  # not 16
    assert retry_smaller({"batch_size": 128}, OomSpec(), (), step=0) is None  # action: prune
