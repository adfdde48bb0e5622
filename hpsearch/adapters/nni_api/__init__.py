"""NNI's trial API, answered by hpsearch: the folder a command trial finds ``nni`` in.

A command trial (``train: {command: python mnist.py}``) runs with this folder first on
its ``PYTHONPATH``, so an NNI trial script's ``import nni`` gets :mod:`nni` here, and
the script runs as it is: ``nni.get_next_parameter()`` returns the trial's parameters,
``nni.report_intermediate_result`` and ``nni.report_final_result`` are its reports.
Nothing here imports hpsearch: the script's own Python runs it.
"""

from pathlib import Path

FOLDER = str(Path(__file__).resolve().parent)
"""The folder to put first on a command trial's ``PYTHONPATH``."""
