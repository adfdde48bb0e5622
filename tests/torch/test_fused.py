"""Fused members train as they would alone: same seed, hyperparameters and batches, same curves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from hpsearch.torch.fused import (
    FusedAdam,
    FusedAdamW,
    FusedGradScaler,
    FusedOptimizer,
    FusedSGD,
    MemberBatches,
    Method,
    fuse,
    keep,
    member_losses,
)

RTOL = 1e-5  # the bar for CPU float32


@dataclass(frozen=True)
class Member:
    lr: float
    weight_decay: float
    seed: int
    dropout: float
    gamma: float = 1.0  # a StepLR's decay per epoch


MEMBERS = (
    Member(3e-3, 1e-4, 1, 0.1, 0.5),
    Member(1e-2, 0.0, 2, 0.0, 0.9),
    Member(1e-3, 1e-3, 3, 0.3, 1.0),
)


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(200, 12, generator=generator)
    y = (x[:, :3].sum(dim=1) > 0).long() + (x[:, 3] > 1).long()
    return x, y


def build(dropout: float) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(12, 16),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(16, 16),
        nn.Tanh(),
        nn.Linear(16, 3),
    )


def solo_optimizer(kind: str, params: Any, m: Member) -> torch.optim.Optimizer:
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=m.lr, weight_decay=m.weight_decay)
    if kind == "adam":
        return torch.optim.Adam(params, lr=m.lr, weight_decay=m.weight_decay, betas=(0.8, 0.99))
    return torch.optim.SGD(
        params, lr=m.lr, momentum=0.9, nesterov=True, weight_decay=m.weight_decay
    )


def fused_optimizer(kind: str, params: Any, members: tuple[Member, ...]) -> FusedOptimizer:
    lrs, decays = [m.lr for m in members], [m.weight_decay for m in members]
    if kind == "adamw":
        return FusedAdamW(params, len(members), lr=lrs, weight_decay=decays)
    if kind == "adam":
        return FusedAdam(params, len(members), lr=lrs, weight_decay=decays, betas=(0.8, 0.99))
    return FusedSGD(params, len(members), lr=lrs, momentum=0.9, nesterov=True, weight_decay=decays)


def train_alone(
    m: Member, kind: str, data: tuple[torch.Tensor, torch.Tensor], epochs: int = 2
) -> tuple[list[float], dict[str, torch.Tensor]]:
    """A trial as a training function writes it: its seed, its DataLoader, its optimizer."""
    torch.manual_seed(m.seed)
    model = build(m.dropout)
    order = torch.Generator().manual_seed(m.seed)
    loader = DataLoader(TensorDataset(*data), batch_size=32, shuffle=True, generator=order)
    optimizer = solo_optimizer(kind, model.parameters(), m)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=m.gamma)
    curve = []
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            curve.append(loss.item())
        schedule.step()
    return curve, model.state_dict()


@dataclass
class Group:
    model: Any
    optimizer: FusedOptimizer
    schedules: list[Any]
    batches: MemberBatches
    curves: list[list[float]]


def open_group(
    kind: str, data: tuple[torch.Tensor, torch.Tensor], members: tuple[Member, ...]
) -> Group:
    modules, dropout_streams, orders = [], [], []
    for m in members:
        torch.manual_seed(m.seed)
        modules.append(build(m.dropout))
        stream = torch.Generator()
        stream.set_state(torch.get_rng_state())  # where the member's global stream stands
        dropout_streams.append(stream)
        orders.append(torch.Generator().manual_seed(m.seed))
    model = fuse(modules, generators=dropout_streams)
    optimizer = fused_optimizer(kind, model.parameters(), members)
    schedules = [
        torch.optim.lr_scheduler.StepLR(optimizer.member(k), step_size=1, gamma=m.gamma)
        for k, m in enumerate(members)
    ]
    batches = MemberBatches(list(data), 32, orders)
    return Group(model, optimizer, schedules, batches, [[] for _ in members])


def run_epoch(group: Group, on_step: Callable[[int], None] | None = None) -> None:
    group.model.train()
    for step, (x, y) in enumerate(group.batches):
        group.optimizer.zero_grad()
        losses = member_losses(nn.CrossEntropyLoss(reduction="none"), group.model(x), y)
        losses.sum().backward()  # type: ignore[no-untyped-call]
        group.optimizer.step()
        for curve, loss in zip(group.curves, losses.tolist(), strict=True):
            curve.append(loss)
        if on_step is not None:
            on_step(step)
    for schedule in group.schedules:
        schedule.step()


def assert_same(fused: list[float], alone: list[float]) -> None:
    assert len(fused) == len(alone)
    assert fused == pytest.approx(alone, rel=RTOL)


def assert_same_state(fused: dict[str, torch.Tensor], alone: dict[str, torch.Tensor]) -> None:
    assert set(fused) == set(alone)
    for name, value in alone.items():
        torch.testing.assert_close(fused[name], value, rtol=RTOL, atol=1e-7)


@pytest.mark.parametrize("kind", ["adamw", "adam", "sgd"])
def test_each_member_trains_as_it_would_alone(
    kind: str, data: tuple[torch.Tensor, torch.Tensor]
) -> None:
    group = open_group(kind, data, MEMBERS)
    for _ in range(2):
        run_epoch(group)
    for k, m in enumerate(MEMBERS):
        curve, state = train_alone(m, kind, data)
        assert_same(group.curves[k], curve)
        assert_same_state(group.model.member_state_dict(k), state)


def test_a_member_leaving_mid_epoch_leaves_the_others_untouched(
    data: tuple[torch.Tensor, torch.Tensor],
) -> None:
    group = open_group("adamw", data, MEMBERS)
    left: dict[str, torch.Tensor] = {}

    def prune_the_middle_one(step: int) -> None:
        if step == 2 and group.optimizer.members == 3:
            left.update({n: t.clone() for n, t in group.model.member_state_dict(1).items()})
            keep([0, 2], group.model, group.optimizer, group.batches)
            group.schedules = [group.schedules[0], group.schedules[2]]
            group.curves = [group.curves[0], group.curves[2]]

    run_epoch(group, prune_the_middle_one)
    run_epoch(group)
    assert group.model.members == 2
    for k, m in enumerate((MEMBERS[0], MEMBERS[2])):
        curve, state = train_alone(m, "adamw", data)
        assert_same(group.curves[k], curve)
        assert_same_state(group.model.member_state_dict(k), state)
    # The pruned member's last parameters were its own three steps' (not the others').
    assert not torch.equal(left["0.weight"], group.model.member_state_dict(0)["0.weight"])


def test_a_member_resumes_from_its_checkpoint_in_another_group(
    data: tuple[torch.Tensor, torch.Tensor],
) -> None:
    first = open_group("adamw", data, MEMBERS)
    run_epoch(first)
    saved = {
        "model": first.model.member_state_dict(2),
        "optimizer": first.optimizer.member_state(2),
        "schedule": first.schedules[2].state_dict(),
        "order": first.batches.generators[2].get_state(),
    }
    # Its group is gone (the driver was stopped); it comes back beside a new member.
    again = open_group("adamw", data, (MEMBERS[2], MEMBERS[0]))
    again.model.load_member_state_dict(0, saved["model"])
    again.optimizer.load_member_state(0, saved["optimizer"])
    again.schedules[0].load_state_dict(saved["schedule"])
    again.batches.generators[0].set_state(saved["order"])
    dropout = again.model.layers[2]
    dropout.generators[0].set_state(first.model.layers[2].generators[2].get_state())
    run_epoch(again)
    curve, state = train_alone(MEMBERS[2], "adamw", data)
    assert_same(first.curves[2] + again.curves[0], curve)
    assert_same_state(again.model.member_state_dict(0), state)


def test_an_inf_in_one_member_skips_only_that_members_step() -> None:
    torch.manual_seed(0)
    modules = [nn.Linear(4, 2) for _ in range(3)]
    model = fuse(modules)
    optimizer = FusedAdamW(model.parameters(), 3, lr=0.1)
    scaler = FusedGradScaler(3, init_scale=2.0**8)
    before = [model.member_state_dict(k)["weight"].clone() for k in range(3)]
    x = torch.randn(3, 5, 4)
    losses = model(x).pow(2).mean(dim=(1, 2))
    losses = losses * torch.tensor([1.0, float("inf"), 1.0])  # member 1 overflows
    optimizer.zero_grad()
    scaler.scale(losses).backward()  # type: ignore[no-untyped-call]
    skipped = scaler.step(optimizer)
    assert skipped.tolist() == [False, True, False]
    assert scaler.scales.tolist() == [2.0**8, 2.0**7, 2.0**8]
    assert optimizer.steps.tolist() == [1.0, 0.0, 1.0]
    after = [model.member_state_dict(k)["weight"] for k in range(3)]
    assert torch.equal(after[1], before[1])
    # The members that stepped took the step an unscaled loss would give them.
    ref_model = fuse(modules)
    reference = FusedAdamW(ref_model.parameters(), 3, lr=0.1)
    ref_losses = ref_model(x).pow(2).mean(dim=(1, 2))
    ref_losses.sum().backward()
    reference.step()
    for k in (0, 2):
        torch.testing.assert_close(after[k], ref_model.member_state_dict(k)["weight"])


def test_the_scale_grows_per_member_after_its_interval() -> None:
    scaler = FusedGradScaler(2, init_scale=4.0, growth_interval=2)
    scaler.update(torch.tensor([False, True]))
    scaler.update(torch.tensor([False, False]))
    assert scaler.scales.tolist() == [8.0, 2.0]


class Custom(nn.Module):
    """A user's class with its own forward: fused through torch.func."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 8)
        self.b = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.b(torch.relu(self.a(x)) + x.sum(dim=-1, keepdim=True))
        return out


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (Custom, (5, 6)),
        (
            lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten()),
            (5, 3, 6, 6),
        ),
        (lambda: nn.Sequential(nn.Conv1d(2, 4, 3, groups=2), nn.LayerNorm([4, 6])), (5, 2, 8)),
        (lambda: nn.Sequential(nn.Linear(6, 4), nn.GELU(), nn.LayerNorm(4)), (5, 6)),
    ],
)
def test_fused_forward_equals_each_members_own(
    make: Callable[[], nn.Module], shape: tuple[int, ...]
) -> None:
    torch.manual_seed(0)
    modules = [make() for _ in range(3)]
    x = torch.randn(3, *shape)
    expected = torch.stack([m(x[k]) for k, m in enumerate(modules)])
    methods: tuple[Method, ...] = ("layers", "vmap")
    for method in methods:
        fused = fuse(modules, method=method)
        torch.testing.assert_close(fused(x), expected, rtol=1e-5, atol=1e-6)
        for k, m in enumerate(modules):
            assert_same_state(fused.member_state_dict(k), m.state_dict())


def test_autocast_runs_each_member_in_lower_precision() -> None:
    torch.manual_seed(0)
    modules = [nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)) for _ in range(2)]
    fused = fuse(modules)
    x = torch.randn(2, 4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fused(x)
        expected = torch.stack([m(x[k]) for k, m in enumerate(modules)])
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), expected.float(), rtol=2e-2, atol=2e-2)


def test_members_of_different_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="share an architecture"):
        fuse([nn.Linear(4, 2), nn.Linear(4, 3)])
    with pytest.raises(ValueError, match="not stacked for 3 members"):
        FusedSGD(fuse([nn.Linear(4, 2)] * 2).parameters(), 3)
