"""Which GPU a CUDA_VISIBLE_DEVICES entry names: NVML's numbers and UUIDs (a fake NVML)."""

from __future__ import annotations

import pytest

from hpsearch.telemetry import cuda_device, gpu_uuids, names_mig, visible_gpus
from tests.telemetry.conftest import FakeGpu, FakeNvml

A = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
B = "GPU-5c1b3d27-0e3b-9d34-5e0a-7f2b1d9c1e20"
C = "GPU-5c9e0b51-6a44-4c1e-8b6f-0c2a7d1e9b33"


def test_the_uuids_are_read_in_nvmls_order_and_nvml_is_shut_down_after() -> None:
    nvml = FakeNvml([FakeGpu(uuid=A), FakeGpu(uuid=B)])

    assert gpu_uuids(nvml) == (A, B)
    assert nvml.shut_down


def test_no_nvml_library_or_a_gpu_that_does_not_answer_gives_no_uuids() -> None:
    assert gpu_uuids(FakeNvml([FakeGpu(uuid=A)], library=False)) == ()
    assert gpu_uuids(FakeNvml([FakeGpu(uuid=A), FakeGpu(uuid=B, lost=True)])) == ()


def test_older_bindings_answering_bytes_give_text() -> None:
    class BytesNvml(FakeNvml):
        def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> bytes:  # type: ignore[override]
            return gpu.uuid.encode()

    assert gpu_uuids(BytesNvml([FakeGpu(uuid=A)])) == (A,)


def test_a_gpu_is_named_to_cuda_by_its_uuid_where_it_is_known() -> None:
    assert cuda_device(1, (A, B, C)) == B
    # No NVML here (logical GPUs), or a number past those it read: the index.
    assert cuda_device(1, ()) == "1"
    assert cuda_device(3, (A, B, C)) == "3"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("2,3", [2, 3]),
        (" 3 , 1", [3, 1]),
        # UUIDs in any order, whole or as their first characters (CUDA reads both).
        (f"{C},{A}", [2, 0]),
        ("GPU-8932f937", [0]),
        (f"1,{C}", [1, 2]),
        # A prefix two GPUs share, a UUID this machine has not, a MIG instance: not a
        # whole GPU NVML numbers.
        ("GPU-5c", None),
        ("GPU-ffffffff", None),
        ("MIG-4f6e5a2b-9c1d-5e3f-8a7b-6c5d4e3f2a1b", None),
    ],
)
def test_visible_gpus_are_read_back_to_nvmls_numbers(
    value: str | None, expected: list[int] | None
) -> None:
    assert visible_gpus(value, lambda: (A, B, C)) == expected


def test_indices_alone_ask_nvml_for_nothing() -> None:
    def not_asked() -> tuple[str, ...]:
        raise AssertionError("NVML asked")

    assert visible_gpus("0,1", not_asked) == [0, 1]


def test_a_mig_instance_is_told_from_a_whole_gpu() -> None:
    assert names_mig("MIG-4f6e5a2b-9c1d-5e3f-8a7b-6c5d4e3f2a1b")
    assert names_mig(f"{A}, MIG-4f6e5a2b")
    assert not names_mig(A)
    assert not names_mig("0,1")
    assert not names_mig(None)
