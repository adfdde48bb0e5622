"""A plain training script with command-line flags: an MLP on scikit-learn's digits.

It knows nothing of hpsearch. Run it by hand::

    python examples/command/train.py --lr 0.003 --width 64 --epochs 5

or let hpsearch search its flags (examples/command/config.yaml). It prints one
JSON line per epoch, which hpsearch reads as a report; everything else it prints
is ordinary output. Where hpsearch gives it a seed and a checkpoint folder
(HPSEARCH_SEED, HPSEARCH_CHECKPOINT_DIR) it uses them: an interrupted trial
resumes at the epoch after its last checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("HPSEARCH_SEED", "0")))
    parser.add_argument("--checkpoint-dir", default=os.environ.get("HPSEARCH_CHECKPOINT_DIR", ""))
    parser.add_argument("--sleep", type=float, default=0.0, help="extra seconds per epoch")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    features, labels = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(
        features / 16.0, labels, test_size=0.2, stratify=labels, random_state=0
    )
    x_train = torch.tensor(x_train, dtype=torch.float32)
    y_train = torch.tensor(y_train)
    x_val = torch.tensor(x_val, dtype=torch.float32)
    y_val = torch.tensor(y_val)
    print(f"training on {len(x_train)} digits, seed {args.seed}")
    model = nn.Sequential(nn.Linear(64, args.width), nn.ReLU(), nn.Linear(args.width, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(args.seed)

    start = 0
    checkpoint = Path(args.checkpoint_dir, "last.pt") if args.checkpoint_dir else None
    if checkpoint is not None:
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
    if checkpoint is not None and checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        start = state["epoch"] + 1
        print(f"resumed from epoch {state['epoch']}")

    for epoch in range(start, args.epochs):
        began = time.perf_counter()
        order = torch.randperm(len(x_train), generator=generator)
        model.train()
        for first in range(0, len(order), args.batch_size):
            batch = order[first : first + args.batch_size]
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x_train[batch]), y_train[batch])
            loss.backward()
            optimizer.step()
        time.sleep(args.sleep)
        model.eval()
        with torch.no_grad():
            accuracy = (model(x_val).argmax(dim=1) == y_val).float().mean().item()
        if checkpoint is not None:
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "generator": generator.get_state(),
                "epoch": epoch,
            }
            torch.save(state, checkpoint.with_suffix(".tmp"))
            checkpoint.with_suffix(".tmp").replace(checkpoint)  # whole, or the previous one
        report = {
            "step": epoch,
            "val_accuracy": accuracy,
            "train_loss": loss.item(),
            "samples": len(x_train),
            "epoch_seconds": time.perf_counter() - began,
            "resumed_at": start,
        }
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
