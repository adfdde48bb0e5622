"""A training script that prints its results as text, as PyTorch's MNIST example does.

It knows nothing of hpsearch: argparse flags in, lines for people out::

    python examples/text-output/train.py --optimizer sgd --lr 0.05 --momentum 0.9

After each epoch it prints, as ``pytorch/examples/mnist/main.py`` prints them::

    Train Epoch: 3 [1408/1437 (98%)]	Loss: 0.082
    Test set: Average loss: 0.1013, Accuracy: 350/360 (97%)

hpsearch passes each trial's parameters with ``{args}`` (``--name=value`` for the
parameters that trial has: a conditional space's branch) and reads the metrics
from those lines with a pattern (examples/text-output/config.yaml).
"""

from __future__ import annotations

import argparse
import os

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.0)  # sgd only
    parser.add_argument("--beta1", type=float, default=0.9)  # adam only
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("HPSEARCH_SEED", "1")))
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    features, labels = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        features / 16.0, labels, test_size=0.2, stratify=labels, random_state=0
    )
    x_train, x_test = (torch.tensor(x, dtype=torch.float32) for x in (x_train, x_test))
    y_train, y_test = torch.tensor(y_train), torch.tensor(y_test)
    model = nn.Sequential(nn.Linear(64, args.width), nn.ReLU(), nn.Linear(args.width, 10))
    optimizer: torch.optim.Optimizer
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(args.beta1, 0.999))

    for epoch in range(1, args.epochs + 1):
        model.train()
        order = torch.randperm(len(x_train))
        for first in range(0, len(order), 32):
            batch = order[first : first + 32]
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x_train[batch]), y_train[batch])
            loss.backward()
            optimizer.step()
        done = len(x_train)
        print(f"Train Epoch: {epoch} [{done}/{done} (100%)]\tLoss: {loss.item():.6f}")
        model.eval()
        with torch.no_grad():
            output = model(x_test)
            test_loss = nn.functional.cross_entropy(output, y_test).item()
            correct = int((output.argmax(dim=1) == y_test).sum())
        print(
            f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: {correct}/{len(x_test)} "
            f"({100.0 * correct / len(x_test):.0f}%)\n",
            flush=True,
        )


if __name__ == "__main__":
    main()
