"""An Optuna objective, as Optuna's own examples write one: it knows nothing of hpsearch.

Run by Optuna alone::

    python examples/optuna_objective/objective.py

or by hpsearch, unchanged, with packing, MLflow runs and ``hpsearch best``
(examples/optuna_objective/config.yaml: ``train: {optuna: ...}``).
"""

from __future__ import annotations

import time

import optuna
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

EPOCHS = 6


def _data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    features, labels = load_digits(return_X_y=True)
    x_train, x_valid, y_train, y_valid = train_test_split(
        features / 16.0, labels, test_size=0.25, stratify=labels, random_state=0
    )
    return (
        torch.tensor(x_train, dtype=torch.float32),
        torch.tensor(y_train),
        torch.tensor(x_valid, dtype=torch.float32),
        torch.tensor(y_valid),
    )


def _model(trial: optuna.Trial) -> nn.Module:
    layers: list[nn.Module] = []
    width_in = 64
    for layer in range(trial.suggest_int("n_layers", 1, 2)):
        width = trial.suggest_int(f"n_units_l{layer}", 16, 128, log=True)
        layers += [nn.Linear(width_in, width), nn.ReLU()]
        width_in = width
    return nn.Sequential(*layers, nn.Linear(width_in, 10))


def _train(trial: optuna.Trial) -> tuple[float, float]:
    torch.manual_seed(trial.number)
    x_train, y_train, x_valid, y_valid = _data()
    model = _model(trial)
    name = trial.suggest_categorical("optimizer", ["Adam", "SGD"])
    lr = trial.suggest_float("lr", 1e-3, 1e-1, log=True)
    optimizer = getattr(torch.optim, name)(model.parameters(), lr=lr)
    accuracy, started = 0.0, time.perf_counter()
    for epoch in range(EPOCHS):
        model.train()
        for first in range(0, len(x_train), 64):
            optimizer.zero_grad()
            out = model(x_train[first : first + 64])
            nn.functional.cross_entropy(out, y_train[first : first + 64]).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            accuracy = (model(x_valid).argmax(dim=1) == y_valid).float().mean().item()
        trial.report(accuracy, epoch)
        if trial.should_prune():
            raise optuna.TrialPruned()
    trial.set_user_attr("epochs", EPOCHS)
    return accuracy, EPOCHS * len(x_train) / (time.perf_counter() - started)


def objective(trial: optuna.Trial) -> float:
    """Validation accuracy of an MLP whose depth, widths, optimizer and lr the trial suggests."""
    accuracy, _ = _train(trial)
    return accuracy


def accuracy_and_speed(trial: optuna.Trial) -> tuple[float, float]:
    """Two objectives: validation accuracy and training samples per second."""
    return _train(trial)


if __name__ == "__main__":
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.MedianPruner())
    study.optimize(objective, n_trials=10)
    print(study.best_trial.params, study.best_value)
