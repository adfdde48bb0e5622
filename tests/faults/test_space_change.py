"""A second config under one study name: its changed space is refused before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hpsearch.config import load_config
from hpsearch.study import open_study
from tests.conftest import BASE_CONFIG, ConfigWriter, cli
from tests.faults.conftest import Drivers

pytestmark = pytest.mark.process


def test_a_parameter_whose_kind_changed_exits_2_in_one_line_and_the_study_keeps_its_trials(
    write_config: ConfigWriter, project: Path, drivers: Drivers
) -> None:
    # The study as a first config left it: two finished trials with x a float.
    config = load_config(write_config())
    handle = open_study(config, as_driver=True)
    for value in (0.2, 0.7):
        handle.study.tell(handle.ask(config.search_space.distributions()), value)
    # The same study name, x now a list of choices: Optuna would crash on it mid-trial.
    space = {**BASE_CONFIG["space"], "x": {"type": "categorical", "choices": [0.25, 0.5]}}
    changed = write_config(yaml.safe_dump({**BASE_CONFIG, "space": space}), name="other.yaml")

    driver = drivers.start(changed)
    _, err = driver.communicate(timeout=120)

    assert driver.returncode == 2, err[-2000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(
        f"error: {changed}: space.x is a choice of [0.25, 0.5], the study has float [0.0, 1.0]"
    )
    assert "new study.name" in lines[0]
    trials = handle.study.get_trials(deepcopy=False)
    assert [(t.state.name, t.value) for t in trials] == [("COMPLETE", 0.2), ("COMPLETE", 0.7)]
    # Reading the study through the refused config is refused with the same line: its
    # "best" would be another search's trial.
    for command in ("best", "trials"):
        refused = cli(command, str(changed))
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.strip() == lines[0], command
    assert cli("best", str(config.source)).returncode == 0  # the study's own config reads it
