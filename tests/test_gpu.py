"""On a real NVIDIA GPU (``pytest -m gpu``; the GPU kit runs them): skipped without one."""

from __future__ import annotations

import os
import time

import pytest
import torch
from torch import nn

from hpsearch import TrialContext
from hpsearch.oom import device_oom
from hpsearch.torch.fused import FusedAdamW, fuse, member_losses

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]


def test_nvml_reads_the_gpu_torch_sees() -> None:
    from hpsearch.telemetry import NvmlBackend

    backend = NvmlBackend()
    try:
        gpus = backend.gpus()
        assert gpus
        assert gpus[0].name == torch.cuda.get_device_name(0)
        sample = backend.sample(time.time())
        assert sample
        assert sample[0].memory_total_mb is not None
        assert sample[0].memory_total_mb > 1000
    finally:
        backend.close()


def test_a_gpu_named_by_its_nvml_uuid_is_the_one_cuda_runs_on() -> None:
    # Trials are pointed at their GPU by NVML's UUID (CUDA may number GPUs otherwise).
    import subprocess
    import sys

    from hpsearch.telemetry import cuda_device, gpu_uuids

    uuids = gpu_uuids()
    assert uuids
    assert all(uuid.startswith("GPU-") for uuid in uuids)
    torchs = str(torch.cuda.get_device_properties(0).uuid).removeprefix("GPU-")
    assert torchs in {uuid.removeprefix("GPU-") for uuid in uuids}
    seen = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch; print(torch.cuda.device_count(), "
            "torch.cuda.get_device_properties(0).uuid)",
        ],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": cuda_device(len(uuids) - 1)},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    assert seen[0] == "1"
    assert seen[1].removeprefix("GPU-") == uuids[-1].removeprefix("GPU-")


def test_a_trial_is_told_the_memory_of_its_own_gpu() -> None:
    # The driver tells the smallest of the search's GPUs (here, a made-up 1 MiB): on GPUs
    # of several sizes, a trial on a larger one is told its own.
    from hpsearch.trial.protocol import Assignment, EventKind, WorkerEvent
    from hpsearch.worker import execute_trial
    from tests.harness import make_launch

    launch = make_launch({}, train="tests.train_functions:reports_its_gpu_memory")
    told_one = launch.settings.model_copy(update={"gpu_memory_mb": 1.0})
    events: list[WorkerEvent] = []
    execute_trial(
        launch.model_copy(update={"settings": told_one}),
        assigned=Assignment(gpus=1.0, gpu_ids=("0",)),
        send=events.append,
    )
    told = [e.metrics["score"] for e in events if e.kind is EventKind.REPORT]
    assert told == [torch.cuda.get_device_properties(0).total_memory / 2**20]


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_a_digits_trial_trains_on_the_gpu_at_each_precision(precision: str) -> None:
    from hpsearch.workloads import digits

    ctx = TrialContext.local(device="cuda")
    digits.train({"epochs": 2, "width": 64, "depth": 1, "precision": precision}, ctx)
    last = ctx.history[-1].metrics
    assert last["val_accuracy"] > 0.5
    assert last["samples_per_sec"] > 0
    assert last["peak_memory_mb"] > 0
    assert ctx.knobs["precision"] == precision


def test_a_real_cuda_oom_is_recognised_as_one() -> None:
    torch.cuda.set_per_process_memory_fraction(0.01)
    total = torch.cuda.get_device_properties(0).total_memory
    try:
        with pytest.raises(torch.OutOfMemoryError) as caught:
            torch.empty(int(total * 0.05), device="cuda", dtype=torch.uint8)
        assert device_oom(caught.value) is not None
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()


def test_fused_members_train_on_the_gpu_as_alone() -> None:
    torch.manual_seed(0)
    modules = [
        nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).cuda() for _ in range(4)
    ]
    alone = [nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).cuda() for _ in range(4)]
    for a, m in zip(alone, modules, strict=True):
        a.load_state_dict(m.state_dict())
    lrs = [1e-3, 3e-3, 1e-2, 3e-2]
    fused = fuse(modules)
    optimizer = FusedAdamW(fused.parameters(), 4, lr=lrs)
    singles = [torch.optim.AdamW(a.parameters(), lr=lr) for a, lr in zip(alone, lrs, strict=True)]
    x = torch.randn(4, 8, 16, device="cuda")
    y = torch.randint(0, 4, (4, 8), device="cuda")
    loss_fn = nn.CrossEntropyLoss(reduction="none")
    for _ in range(5):
        optimizer.zero_grad()
        member_losses(loss_fn, fused(x), y).sum().backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        for k, (a, o) in enumerate(zip(alone, singles, strict=True)):
            o.zero_grad()
            loss: torch.Tensor = loss_fn(a(x[k]), y[k]).mean()
            loss.backward()  # type: ignore[no-untyped-call]
            o.step()
    for k, a in enumerate(alone):
        for name, value in a.state_dict().items():
            torch.testing.assert_close(
                fused.member_state_dict(k)[name], value, rtol=1e-4, atol=1e-5
            )
