"""A training function whose optimizer's parameters depend on the optimizer chosen.

The space (config.yaml) gives ``momentum`` and ``nesterov`` only to SGD trials
and ``beta1`` only to Adam trials, so each trial receives just its branch's
parameters. The function checkpoints every epoch with ``ctx.save_checkpoint``;
a trial interrupted (Ctrl-C, a killed driver, a lost node) resumes after its
last checkpoint on the next ``hpsearch run``.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

import hpsearch


def make_optimizer(params: dict[str, Any], model: nn.Module) -> torch.optim.Optimizer:
    """The optimizer of the trial's branch, with that branch's parameters."""
    if params["optimizer"] == "sgd":
        return torch.optim.SGD(
            model.parameters(),
            lr=params["lr"],
            momentum=params["momentum"],
            nesterov=params["nesterov"] and params["momentum"] > 0,
        )
    return torch.optim.Adam(model.parameters(), lr=params["lr"], betas=(params["beta1"], 0.999))


def train(params: dict[str, Any], ctx: hpsearch.TrialContext) -> None:
    """Train an MLP on digits for ``epochs``, reporting and checkpointing each epoch."""
    torch.manual_seed(ctx.seed)
    features, labels = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = (
        torch.tensor(a) for a in train_test_split(features / 16.0, labels, random_state=0)
    )
    x_train, x_val = x_train.float(), x_val.float()
    model = nn.Sequential(nn.Linear(64, params["width"]), nn.ReLU(), nn.Linear(params["width"], 10))
    optimizer = make_optimizer(params, model)
    order = torch.Generator().manual_seed(ctx.seed)

    start = 0
    saved = ctx.load_checkpoint()
    if saved is not None:  # an earlier run of this trial was interrupted
        state = saved.load()
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        order.set_state(state["order"])
        start = saved.step + 1

    for epoch in range(start, params["epochs"]):
        model.train()
        for batch in torch.randperm(len(x_train), generator=order).split(64):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x_train[batch]), y_train[batch]).backward()
            optimizer.step()
        time.sleep(params.get("epoch_sleep", 0.0))  # to watch an interruption by hand
        model.eval()
        with torch.no_grad():
            accuracy = (model(x_val).argmax(dim=1) == y_val).float().mean().item()
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
        ctx.save_checkpoint({**state, "order": order.get_state()}, epoch)
        ctx.report(epoch, val_accuracy=accuracy, resumed_at=start)
        if ctx.should_prune():
            raise hpsearch.TrialPruned(f"pruned after epoch {epoch}")
