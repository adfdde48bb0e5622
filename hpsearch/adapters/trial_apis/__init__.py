"""Other tools' trial APIs, answered by hpsearch: the folder a command trial finds them in.

A command trial (``train: {command: python train.py}``) runs with this folder first on
its ``PYTHONPATH``, so a script written for another tool runs as it is:

* an NNI trial script's ``import nni`` gets :mod:`nni` here: ``nni.get_next_parameter()``
  returns the trial's parameters, ``nni.report_intermediate_result`` and
  ``nni.report_final_result`` are its reports;
* a W&B sweep's script's ``import wandb`` gets :mod:`wandb` here: ``wandb.init()`` is
  the trial's run, ``wandb.config`` holds the trial's parameters (over the defaults the
  script gives ``init``, as a sweep's do), each ``wandb.log`` is a report at the run's
  step, and the objective is the metric's last logged value, as a sweep reads it from
  the run's summary.

Both report as a command trial does, through :mod:`_hpsearch_report`. Nothing here
imports hpsearch: the script's own Python runs it.
"""

from pathlib import Path

FOLDER = str(Path(__file__).resolve().parent)
"""The folder to put first on a command trial's ``PYTHONPATH``."""
