"""Packing in wall-clock time: real Ray, a logical GPU, simulated telemetry, trials of 0.3 s."""

from __future__ import annotations

import json
import statistics
import warnings
from pathlib import Path
from typing import Any

import pytest

import hpsearch
from hpsearch import attrs
from tests.conftest import ConfigWriter, load_search, merge, mlflow_client

H200_MB = 143771.0
ALONE_AT_MOST = 3
"""Trials run one at a time before their GPU is given a second: each of 0.3 s is read at
least once at :data:`INTERVAL_S`, and two readings with trials running are evidence
enough, however they fall across trials (one more trial: a loaded machine's late
sample)."""
INTERVAL_S = 0.2
"""The simulated monitor's sampling interval: what a trial's GPU sharing is read at."""
OVERLAP_S = 5 * INTERVAL_S
"""Two runs at once this long hold samples of their GPU taken with both on it, however
late a loaded machine takes some."""


def _decisions(project: Path, run_id: str) -> list[dict[str, Any]]:
    path = mlflow_client(project).download_artifacts(run_id, "packing_decisions.json", str(project))
    decisions: list[dict[str, Any]] = json.loads(Path(path).read_text())
    return decisions


@pytest.mark.process
@pytest.mark.usefixtures("seeded_store", "ray_one_gpu")
def test_trials_of_a_few_tenths_of_a_second_share_their_gpu_within_seconds(
    write_config: ConfigWriter, project: Path
) -> None:
    # The H200 main job's trials, shorter: 2% and 830 MiB of a 141 GB card, 0.3 s each,
    # their loop waiting on the GPU (a tenth of a core).
    search = merge(
        load_search(util=2, memory=830, trials=24, seconds=0.3),
        {
            "space": {"cpus": 0.1},
            "execution": {"num_cpus": None, "cpus_per_trial": 0.25},
            "packing": {"mode": "auto", "probe_seconds": 5, "cooldown_seconds": 10},
            "telemetry": {"interval_s": INTERVAL_S, "simulated": {"memory_total_mb": H200_MB}},
        },
    )

    outcome = hpsearch.run(write_config(search))

    trials = outcome.results.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 24
    assert outcome.mlflow_parent_run_id is not None
    decisions = _decisions(project, outcome.mlflow_parent_run_id)
    packed_at = min(d["time"] for d in decisions if d["limit"] >= 2)
    # The GPU took a second trial once the first few, each too short to be measured
    # alone, had together been read: evidence adds up across trials, whatever each
    # lasts (the rule this replaced waited for one trial to run 10 s: never, here).
    # In seconds that is within 5 s of the first trial's end where this machine runs
    # at its usual pace; that target is bench_ramp's to measure, not a test's (a CI
    # run at twice its usual time took 5.5 s, two trials having run alone).
    held = sorted(
        (t.datetime_start.timestamp(), t.datetime_complete.timestamp())
        for t in trials
        if t.datetime_start is not None and t.datetime_complete is not None
    )
    alone = [s for s, _ in held if s < packed_at]
    assert 1 <= len(alone) <= ALONE_AT_MOST, (len(alone), decisions[:4])
    # And hpsearch held two or more of them on the GPU at once in its next admissions
    # (admitted, not ended), whenever Ray's new workers started.
    after = [s for s, _ in held if s >= packed_at][:4]
    assert max(sum(s <= w < e for s, e in held) for w in after) >= 2, (packed_at, held[:8])

    # And trials that ran at once were recorded sharing their GPU (their own samples'
    # count of trials on it). Whether any ran at once soon after the rise is Ray's part,
    # not packing's: Ray may take many seconds to start the new workers while the first
    # one runs the trials one after another (16-23 s in fresh-clone make test runs on a
    # slow day), and where this machine's cores are taken each trial takes several times
    # its 0.3 s. So the whole search is read: by its end, the new workers ran trials.
    def sharing(trial: Any) -> int:
        return int(trial.user_attrs[attrs.GPU]["trials_sharing_max"])

    # Each trial's run in its worker: its end less its run time, to its end.
    runs = []
    for t in trials:
        assert t.datetime_complete is not None
        end = t.datetime_complete.timestamp()
        runs.append((end - float(t.user_attrs[attrs.DURATION]), end, t))
    together = [
        (a[2], b[2])
        for i, a in enumerate(runs)
        for b in runs[i + 1 :]
        if min(a[1], b[1]) - max(a[0], b[0]) >= OVERLAP_S
    ]
    if together:
        # A run's end is when the driver recorded it, later than the worker's by however
        # far the driver lags; on a loaded machine a pair read as overlapping may not have
        # (a fresh clone's make test at 2.5 times its usual time: 1 such pair of 58). A
        # sharing record that failed would leave most pairs unseen.
        unseen = [(a.number, b.number) for a, b in together if min(sharing(a), sharing(b)) < 2]
        assert len(unseen) <= len(together) // 10, (unseen, len(together))
    else:
        took = statistics.median(t.duration.total_seconds() for t in trials if t.duration)
        warnings.warn(
            f"whether packed trials overlapped was not checked: no two ran at once for "
            f"{OVERLAP_S:g} s (trials of 0.3 s took {took:.1f} s, median)",
            stacklevel=1,
        )
    # Each count above one was said with its reason, and the ones measured with their steps.
    rises = [d for d in decisions if d["previous"] and d["limit"] > d["previous"]]
    assert all(d["reason"].startswith("trying ") for d in rises)
    assert any("judged" in d for d in decisions)
