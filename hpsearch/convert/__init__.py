"""Other tools' search definitions as hpsearch configs (``hpsearch convert``).

The tree: ``_base`` (:class:`Converted`, the space check, errors that name the
source's key), ``_wandb`` (a W&B sweep's YAML), ``_nni`` (an NNI
``search_space.json``) and ``_nni_experiment`` (an NNI experiment's ``config.yml``).
A key a converter cannot carry over is a one-line
:class:`~hpsearch.errors.ConfigError` naming it, never a silent drop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from hpsearch.config import NNI_EXPERIMENT_KEYS
from hpsearch.config._yaml import read_yaml
from hpsearch.convert._base import Converted, train_section
from hpsearch.convert._nni import from_nni
from hpsearch.convert._nni_experiment import from_nni_experiment
from hpsearch.convert._wandb import from_wandb
from hpsearch.errors import ConfigError

__all__ = ["Converted", "convert"]

_HPSEARCH_KEYS = frozenset({"study", "train", "space", "objective", "objectives"})
"""Keys that make a YAML file (without a sweep's ``parameters``) a config of hpsearch's own."""


def convert(
    path: Path,
    *,
    train: str | None = None,
    metric: str | None = None,
    direction: Literal["maximize", "minimize"] = "maximize",
    n_trials: int | None = None,
) -> Converted:
    """The hpsearch config of a W&B sweep (``.yaml``), an NNI experiment config (``.yml``,
    ``.yaml``) or an NNI search space (``.json``).

    Args:
        train: what the trials run, where the source does not say (or to replace it):
            ``package.module:function``, or a command line (``{args}`` for the parameters).
        metric: the objective's metric, where the source does not say (or to replace it).
        direction: the objective's direction, with ``metric``.
        n_trials: the search's number of trials (W&B's ``run_cap``).

    Raises:
        ConfigError: the file is neither, or holds a key with no hpsearch equivalent.
    """
    if path.suffix == ".json":
        converted = from_nni(path)
    elif path.suffix in (".yaml", ".yml"):
        data = read_yaml(path).data
        if isinstance(data, dict) and "parameters" not in data and _HPSEARCH_KEYS & set(data):
            raise ConfigError(
                path,
                "",
                "is an hpsearch config already, not a W&B sweep or an NNI experiment",
                f"run it as it is: hpsearch run {path}",
            )
        nni = isinstance(data, dict) and any(key in data for key in NNI_EXPERIMENT_KEYS)
        converted = from_nni_experiment(path) if nni else from_wandb(path)
    else:
        raise ConfigError(
            path,
            "",
            "not a W&B sweep or an NNI experiment config (.yaml, .yml), or an NNI search "
            "space (.json)",
            "check the path",
        )
    config = converted.config
    if train is not None:
        config["train"] = train_section(train)
    _with_train_env(converted)
    if metric is not None:
        config["objective"] = {"metric": metric, "direction": direction}
    if n_trials is not None:
        config["study"]["n_trials"] = n_trials
    order = ("study", "objective", "train", "space", "execution", "tracking")
    converted.config = {key: config[key] for key in order if key in config}
    return converted


def _with_train_env(converted: Converted) -> None:
    """Set the environment the source's trial code needs in a command ``train``, or say
    where none is written yet."""
    if not converted.train_env:
        return
    train = converted.config.get("train")
    if isinstance(train, dict) and "command" in train:
        train["env"] = {**train.get("env", {}), **converted.train_env}
        return
    written = ", ".join(f"{k}: {v}" for k, v in converted.train_env.items())
    converted.notes.append(
        f"A command trial running this trial code needs train.env: {{{written}}} (its "
        "parameters nested, as the source gave them)."
    )
