"""Each trial's seed: derived from the study's seed and the trial number, and applied."""

from __future__ import annotations

import random
import sys
import zlib

SEED_SPACE = 2**32
"""Seeds are taken modulo this (NumPy's legacy seeding takes no more)."""


def trial_seed(study_seed: int | None, study_name: str, number: int) -> int:
    """The seed of trial ``number``: ``study.sampler.seed + number``.

    Without a study seed the base is a stable hash of the study name, so a study's
    trials still get distinct, reproducible seeds. ``hpsearch rerun`` makes a study
    of one trial whose seed is the original trial's seed, so trial 0 of it gets it.
    """
    base = study_seed if study_seed is not None else zlib.crc32(study_name.encode("utf-8"))
    return (base + number) % SEED_SPACE


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's and torch's global generators (those imported).

    Done before each trial: a reused worker would otherwise carry the previous
    trial's generator state into the next, and results would depend on the order.
    """
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % SEED_SPACE)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
