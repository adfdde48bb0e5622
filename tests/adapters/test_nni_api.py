"""An NNI trial script runs as it is, as a command trial: NNI's trial API is hpsearch's."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch import TrialContext
from hpsearch.adapters import CommandFailed
from tests.adapters.trial_scripts import run_script

pytestmark = pytest.mark.process  # each test runs a script

# As NNI's examples write a trial (examples/trials/mnist-pytorch/mnist.py), less the model.
NNI_TRIAL = """
import argparse
import logging

import nni
from nni.utils import merge_parameter


def get_params():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    args, _ = parser.parse_known_args()
    return args


if __name__ == "__main__":
    tuner_params = nni.get_next_parameter()
    logging.getLogger("mnist").debug(tuner_params)
    params = vars(merge_parameter(get_params(), tuner_params))
    for epoch in range(params["epochs"]):
        nni.report_intermediate_result(params["lr"] * (epoch + 1))
    nni.report_final_result({"default": params["lr"] * 10, "loss": 0.5})
    print("ids", nni.get_trial_id(), nni.get_sequence_id(), nni.get_experiment_id())
"""


@pytest.mark.parametrize("metrics", ["stdout-jsonl", "file-jsonl"])
def test_an_nni_trial_gets_its_parameters_and_its_reports_are_the_trials(
    tmp_path: Path, metrics: str, capfd: pytest.CaptureFixture[str]
) -> None:
    ctx = TrialContext.local(trial_number=7)
    final = run_script(tmp_path, NNI_TRIAL, {"lr": 0.1, "batch_size": 32}, ctx, metrics=metrics)
    # Each intermediate result a step, NNI's "default" metric; the final one the trial's.
    assert [r.step for r in ctx.history] == [0, 1, 2]
    assert [r.metrics["default"] for r in ctx.history] == pytest.approx([0.1, 0.2, 0.3])
    assert final == {"default": pytest.approx(1.0), "loss": 0.5}
    assert "ids 7 7 my-study" in capfd.readouterr().out


def test_merge_parameter_refuses_what_the_scripts_flags_lack_as_nni_does(tmp_path: Path) -> None:
    with pytest.raises(CommandFailed, match="Key 'momentum' not found in base parameters"):
        run_script(tmp_path, NNI_TRIAL, {"lr": 0.1, "momentum": 0.9}, TrialContext.local())
    with pytest.raises(CommandFailed, match=r'Expected "batch_size" .* type int, but found str'):
        run_script(tmp_path, NNI_TRIAL, {"batch_size": "32"}, TrialContext.local())
