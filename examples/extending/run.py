"""Run search.yaml with the parts of this folder: python run.py [listener|policy|tracker|runner]."""

from __future__ import annotations

import sys
from pathlib import Path

from budgeted import Budgeted
from ended_lines import EndedLines
from run_log import RunLog
from two_at_most import TwoAtMost

import hpsearch
from hpsearch.config import load_config
from hpsearch.runner import SimulatedRunner

part = sys.argv[1] if len(sys.argv) > 1 else "listener"
config = load_config(Path(__file__).resolve().parent / "search.yaml")
# A study of its own for each part: each runs the whole search.
config = config.model_copy(
    update={"study": config.study.model_copy(update={"name": f"extending-{part}"})}
)
if part == "listener":
    ended = EndedLines(Path("ended.jsonl"))
    outcome = hpsearch.run(config, runner=SimulatedRunner(), listeners=[ended])
elif part == "policy":
    outcome = hpsearch.run(config, runner=SimulatedRunner(), policy=TwoAtMost())
elif part == "tracker":
    outcome = hpsearch.run(config, runner=SimulatedRunner(), tracker=RunLog(Path("runs.log")))
else:
    outcome = hpsearch.run(config, runner=Budgeted(most=20))
print(f"{outcome.finished} trials; best {outcome.results.best_trial.values}")
