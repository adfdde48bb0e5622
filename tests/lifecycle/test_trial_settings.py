"""The user's code checked once before a search: what the search says of it first."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch.config import load_config
from hpsearch.errors import ConfigError
from hpsearch.lifecycle import check_user_code
from tests.conftest import ConfigWriter


def test_a_trainables_with_resources_is_said_with_the_setting_that_gives_it(
    write_config: ConfigWriter,
) -> None:
    path = write_config({"train": {"tune": "tests.tune_trainables:asks_resources"}})
    assert check_user_code(load_config(path)).notes == (
        f"{path}: train.tune: 'tests.tune_trainables:asks_resources' asks Tune for 2 CPU, "
        "1 GPU (tune.with_resources); each trial gets execution.cpus_per_trial CPUs (1) and "
        "its GPU share from packing (packing.mode: off for a whole GPU each); set "
        "execution.cpus_per_trial: 2 for its CPUs",
    )
    given = write_config(
        {
            "train": {"tune": "tests.tune_trainables:asks_resources"},
            "execution": {"cpus_per_trial": 2},
        }
    )
    [note] = check_user_code(load_config(given)).notes
    assert "(tune.with_resources); each trial gets execution.cpus_per_trial CPUs (2)" in note
    assert "set execution.cpus_per_trial" not in note  # its CPUs given: the GPU is said


def test_nothing_is_said_of_a_trainable_that_gets_what_it_asks(write_config: ConfigWriter) -> None:
    for trainable in ("asks_one_cpu", "trainable"):  # one CPU; tune.with_parameters only
        path = write_config({"train": {"tune": f"tests.tune_trainables:{trainable}"}})
        assert check_user_code(load_config(path)).notes == ()


def test_a_module_of_the_project_that_workers_would_import_for_pythons_is_one_line(
    write_config: ConfigWriter, project: Path
) -> None:
    import code  # noqa: F401 - pdb imports it, and `import ray` pdb: every worker does

    (project / "code.py").write_text("import sys\nsys.argv[1]\n")  # a training script
    path = write_config()
    with pytest.raises(ConfigError) as raised:
        check_user_code(load_config(path))
    error = raised.value
    assert (error.key, error.fix) == ("train", "rename code.py (and what imports it)")
    assert error.problem.startswith(f"code.py in {project} has the name of the module 'code' (")
    assert "would import code.py instead and fail to start" in error.problem
