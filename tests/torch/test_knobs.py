"""Knobs: read from params, made effective for the device, applied to loader, model, steps."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpsearch import TrialContext
from hpsearch.torch import Device, Knobs, configure, effective_knobs, knobs_from_params
from hpsearch.workloads.digits import build_model, checkpoint_hidden_layers

CPU = Device("cpu")
AMPERE = Device("cuda", bf16=True, tf32=True)


def test_params_are_read_and_others_left_alone() -> None:
    knobs = knobs_from_params(
        {"batch_size": 32, "precision": "bf16", "tf32": "true", "prefetch_factor": "none", "lr": 1}
    )
    assert knobs == Knobs(batch_size=32, precision="bf16", tf32=True, prefetch_factor=None)


def test_effective_batch_size_sets_accumulation() -> None:
    knobs = knobs_from_params({"batch_size": 32, "effective_batch_size": 128})
    assert knobs.grad_accum_steps == 4
    assert knobs.effective_batch_size == 128
    with pytest.raises(ValueError, match="not a multiple of batch_size 48"):
        knobs_from_params({"batch_size": 48, "effective_batch_size": 128})
    with pytest.raises(ValueError, match="contradicts"):
        knobs_from_params({"batch_size": 32, "effective_batch_size": 128, "grad_accum_steps": 2})


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"precision": "fp8"}, "precision must be one of fp32, fp16, bf16"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"num_workers": -1}, "num_workers must be >= 0"),
        ({"compile_mode": "fast"}, "compile_mode must be one of"),
        ({"channels_last": "yes"}, "channels_last must be true or false"),
    ],
)
def test_bad_values_are_named(params: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        knobs_from_params(params)


def test_gpu_knobs_on_a_cpu_run_as_what_applies_and_say_so() -> None:
    requested = Knobs(
        precision="fp16", tf32=True, cudnn_benchmark=True, pin_memory=True, non_blocking=True
    )
    knobs, notes = effective_knobs(requested, CPU)
    assert (knobs.precision, knobs.tf32, knobs.cudnn_benchmark) == ("fp32", False, False)
    assert (knobs.pin_memory, knobs.non_blocking) == (False, False)
    assert [n.split(":")[0] for n in notes] == [
        "precision",
        "tf32",
        "cudnn_benchmark",
        "pin_memory",
        "non_blocking",
    ]
    assert "needs CUDA" in notes[0]


def test_the_same_knobs_apply_on_an_ampere_gpu() -> None:
    requested = Knobs(precision="fp16", tf32=True, cudnn_benchmark=True)
    knobs, notes = effective_knobs(requested, AMPERE)
    assert notes == []
    assert (knobs.precision, knobs.tf32, knobs.cudnn_benchmark) == ("fp16", True, True)
    assert (knobs.pin_memory, knobs.non_blocking) == (True, True)  # auto on CUDA


def test_older_gpus_lose_bf16_and_tf32() -> None:
    knobs, notes = effective_knobs(
        Knobs(precision="bf16", tf32=True), Device("cuda", bf16=False, tf32=False)
    )
    assert (knobs.precision, knobs.tf32) == ("fp32", False)
    assert len(notes) == 2


def test_compile_without_a_compiler_is_turned_off() -> None:
    knobs, notes = effective_knobs(Knobs(compile=True), Device("cpu", compiler=False))
    assert knobs.compile is False
    assert "C++ compiler" in notes[0]


def test_dataloader_rejects_nothing_the_knobs_allow() -> None:
    data = TensorDataset(torch.zeros(10, 2))
    setup = configure({"num_workers": 0, "prefetch_factor": 4, "persistent_workers": True})
    assert setup.loader_kwargs() == {"batch_size": 64, "num_workers": 0, "pin_memory": False}
    loader = setup.loader(data)  # DataLoader raises ValueError for either with 0 workers
    assert loader.prefetch_factor is None
    assert not loader.persistent_workers
    assert setup.knobs.prefetch_factor is None
    assert any(n.startswith("prefetch_factor") for n in setup.notes)

    setup = configure({"num_workers": 2, "prefetch_factor": 4, "batch_size": 5})
    loader = setup.loader(data, shuffle=True)
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (2, 4, True)
    assert loader.batch_size == 5


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float32)],
)
def test_autocast_dtype(precision: str, dtype: torch.dtype) -> None:
    setup = configure({"precision": precision})
    with setup.autocast():
        product = torch.ones(4, 4) @ torch.ones(4, 4)
    assert product.dtype == dtype
    assert setup.knobs.precision == ("fp32" if precision == "fp16" else precision)


def test_every_global_flag_is_set_each_time() -> None:
    # A reused worker keeps the previous trial's flags unless each trial sets them.
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    configure({"tf32": True, "cudnn_benchmark": True})  # neither applies on a CPU
    assert torch.backends.cudnn.benchmark is False
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cudnn.allow_tf32 is False


def _train_once(params: dict[str, object], x: torch.Tensor, y: torch.Tensor) -> nn.Linear:
    torch.manual_seed(1)
    model = nn.Linear(x.shape[1], 3)
    setup = configure(params)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    size = setup.knobs.batch_size
    stepped = [
        setup.backward(
            nn.functional.cross_entropy(model(x[i : i + size]), y[i : i + size]),
            optimizer,
            samples=len(y[i : i + size]),
        )
        for i in range(0, len(y), size)
    ]
    stepped.append(setup.flush(optimizer))
    assert stepped.count(True) == 1  # one optimizer step for the whole batch
    return model


@pytest.mark.parametrize("samples", [64, 40])
def test_accumulated_gradients_equal_one_big_batch(samples: int) -> None:
    # 64: four full micro-batches of 16; 40: 16 + 16 + 8, flushed as a partial window.
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 8, generator=generator)
    y = torch.randint(0, 3, (samples,), generator=generator)
    big = _train_once({"batch_size": 64}, x, y)
    accumulated = _train_once({"batch_size": 16, "effective_batch_size": 64}, x, y)
    torch.testing.assert_close(accumulated.weight, big.weight, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(accumulated.bias, big.bias, atol=1e-6, rtol=1e-5)
    torch.manual_seed(1)
    untouched = nn.Linear(8, 3)
    assert not torch.allclose(untouched.weight, big.weight)


def test_gradient_checkpointing_hook_keeps_the_gradients() -> None:
    x = torch.randn(32, 64)
    y = torch.randint(0, 10, (32,))
    grads = []
    for on in (False, True):
        torch.manual_seed(3)
        setup = configure({"grad_checkpointing": on})
        model = setup.prepare_model(build_model(32, 2, 0.0), checkpointing=checkpoint_hidden_layers)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        grads.append([p.grad for p in model.parameters()])
        assert setup.knobs.grad_checkpointing is on
    assert isinstance(model, nn.Sequential)
    assert "_Checkpointed" in repr(type(model[0]))
    for plain, recomputed in zip(*grads, strict=True):
        torch.testing.assert_close(plain, recomputed)


def test_checkpointing_without_a_hook_is_recorded_as_off() -> None:
    ctx = TrialContext.local()
    setup = configure({"grad_checkpointing": True}, ctx)
    assert ctx.knobs["grad_checkpointing"] is True
    setup.prepare_model(nn.Linear(2, 2))
    assert setup.knobs.grad_checkpointing is False
    assert setup.notes[-1].startswith("grad_checkpointing: True -> False")
    assert ctx.knobs["grad_checkpointing"] is False  # the record follows
    assert ctx.knob_notes == setup.notes


def test_channels_last_reaches_model_and_inputs() -> None:
    setup = configure({"channels_last": True})
    model = setup.prepare_model(nn.Conv2d(3, 4, 3))
    assert isinstance(model, nn.Conv2d)
    assert model.weight.is_contiguous(memory_format=torch.channels_last)
    images, labels = setup.to_device((torch.randn(2, 3, 8, 8), torch.tensor([0, 1])))
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert labels.shape == (2,)


def test_the_context_gets_the_knobs_and_the_meter() -> None:
    ctx = TrialContext.local(trial_number=7)
    setup = configure({"precision": "fp16", "batch_size": 8}, ctx)
    assert ctx.knobs["precision"] == "fp32"
    assert ctx.knobs["effective_batch_size"] == 8
    assert ctx.knob_notes == setup.notes
    for _ in setup.batches([torch.zeros(8, 2)] * 5):
        pass
    ctx.report(0, val_accuracy=0.5, train_seconds=-1.0)
    reported = ctx.history[0].metrics
    assert reported["val_accuracy"] == 0.5
    assert reported["train_seconds"] == -1.0  # the user's own value wins
    assert reported["samples_per_sec"] > 0
    assert 0 <= reported["data_wait_share"] <= 1
    assert reported["peak_memory_mb"] > 0
