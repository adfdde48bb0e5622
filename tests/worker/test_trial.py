"""A trial's life in its worker, without Ray: outcomes, the first event's placement, OOM retries."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from hpsearch.oom import BatchRetry, OomSpec, halved
from hpsearch.trial.death import captured_output
from hpsearch.trial.protocol import (
    Assignment,
    EventKind,
    Outcome,
    TrialLaunch,
    WorkerEvent,
    dump_event,
    load_event,
)
from hpsearch.trial.script import CommandSpec
from hpsearch.worker import execute_trial, use_gpu
from tests.harness import make_launch

HERE = Assignment(cpus=1.0, gpu_ids=(), node_id="node", pid=7)


def _execute_captured(launch: TrialLaunch, out: Path, err: Path) -> WorkerEvent:
    """``launch`` run with its output captured to ``out`` and ``err``, as a worker runs it."""
    with captured_output(str(out), str(err)):
        return execute_trial(
            launch.model_copy(update={"stdout_file": str(out), "stderr_file": str(err)}),
            assigned=HERE,
            send=lambda _: None,
        )


def _execute(
    train: str, params: dict[str, Any], oom: OomSpec | None = None
) -> tuple[list[WorkerEvent], WorkerEvent]:
    sent: list[WorkerEvent] = []
    end = execute_trial(make_launch(params, train=train, oom=oom), assigned=HERE, send=sent.append)
    return sent, end


def test_reports_reach_the_driver_and_the_first_carries_the_placement() -> None:
    sent, end = _execute("tests.train_functions:quick", {"x": 0.5, "steps": 3})
    assert [e.kind for e in sent] == [EventKind.REPORT] * 3
    assert [e.step for e in sent] == [0, 1, 2]
    assert sent[0].assigned == HERE
    assert all(e.assigned is None for e in sent[1:])
    assert end.kind is EventKind.END
    assert end.outcome is Outcome.COMPLETE
    assert end.assigned == HERE
    # As plain data (a runner's) and back, as the driver decodes it.
    assert [load_event(dump_event(e)) for e in [*sent, end]] == [*sent, end]


def test_a_failure_keeps_its_traceback_and_a_returned_value_completes() -> None:
    _, failed = _execute("tests.train_functions:failing", {"x": 0.9})
    assert failed.outcome is Outcome.FAIL
    assert "RuntimeError: boom at x=0.900" in failed.error
    _, returned = _execute("tests.train_functions:returns_value", {"x": 2.0})
    assert returned.outcome is Outcome.COMPLETE
    assert returned.metrics == {"score": 4.0}


def test_should_prune_asks_the_oracle_for_the_step_just_reported() -> None:
    asked: list[int] = []

    def oracle(step: int) -> bool:
        asked.append(step)
        return step >= 2

    sent: list[WorkerEvent] = []
    launch = make_launch({"x": 0.5, "steps": 6}, train="tests.train_functions:prunable")
    end = execute_trial(launch, assigned=HERE, send=sent.append, oracle=oracle)
    assert end.outcome is Outcome.PRUNED
    assert asked == [0, 1, 2]
    assert [e.step for e in sent] == [0, 1, 2]


def test_out_of_memory_retries_with_half_the_batch_until_it_fits() -> None:
    retry = OomSpec(action="retry_smaller_batch")
    sent, end = _execute("tests.train_functions:fits_up_to", {"batch_size": 128, "fits": 32}, retry)

    assert end.outcome is Outcome.COMPLETE
    assert end.end is not None
    assert end.end.retries == (
        BatchRetry(step=0, batch_size=128, retry_batch_size=64, retry_grad_accum_steps=2),
        BatchRetry(step=0, batch_size=64, retry_batch_size=32, retry_grad_accum_steps=4),
    )
    batches = [e.metrics["batch"] for e in sent if "batch" in e.metrics]
    assert batches == [128, 64, 32]
    assert sent[-1].metrics["accumulation"] == 4  # the effective batch stayed 128


def test_out_of_memory_past_the_last_halving_is_pruned_with_its_report() -> None:
    once = OomSpec(action="retry_smaller_batch", max_halvings=1)
    _, end = _execute("tests.train_functions:fits_up_to", {"batch_size": 128, "fits": 16}, once)

    assert end.outcome is Outcome.PRUNED
    assert end.error == ""
    assert end.end is not None
    assert end.end.oom is not None
    assert end.end.oom.kind == "torch"
    assert end.end.oom.message == "CUDA out of memory. Tried to allocate 2.00 GiB"
    assert end.end.oom.step == 0
    assert [r.retry_batch_size for r in end.end.retries] == [64]


def test_without_retries_out_of_memory_ends_the_trial_at_once() -> None:
    _, end = _execute("tests.train_functions:fits_up_to", {"batch_size": 64, "fits": 32})
    assert end.outcome is Outcome.PRUNED
    assert end.end is not None
    assert end.end.oom is not None
    assert end.end.retries == ()


def test_halving_keeps_the_effective_batch_or_says_it_cannot() -> None:
    assert halved({"batch_size": 64}) == {"batch_size": 32, "grad_accum_steps": 2}
    assert halved({"batch_size": 64, "effective_batch_size": 128}) == {
        "batch_size": 32,
        "effective_batch_size": 128,
    }
    assert halved({"batch_size": 1}) is None
    assert halved({"batch_size": 33}) is None
    assert halved({"lr": 0.1}) is None


def test_a_returned_string_list_or_bad_dict_value_is_blamed_on_what_train_returned() -> None:
    for returned, says in (
        ("0.9", "train returned a str; return a number (the objective 'score')"),
        ([0.9, 0.8], "train returned a list; return a number"),
        ({"score": "high"}, "what train returned: metric 'score' must be a real number, got str"),
    ):
        _, end = _execute("tests.train_functions:returns_given", {"x": 0.5, "given": returned})
        assert end.outcome is Outcome.FAIL
        assert says in end.error
        assert "ctx.report" not in end.error


def test_a_returned_dict_is_read_as_tune_reads_a_result_nested_and_with_text_left_out() -> None:
    returned = {"score": 0.5, "val": {"acc": 0.9, "per_class": [0.8, 1.0]}, "ckpt": "/x/m.pt"}
    _, end = _execute("tests.train_functions:returns_given", {"x": 0.5, "given": returned})
    assert end.outcome is Outcome.COMPLETE
    assert end.metrics == {"score": 0.5, "val/acc": 0.9}


def test_sys_exit_0_ends_the_function_as_a_return_and_another_code_fails_it_in_a_line() -> None:
    # SystemExit is no Exception: let through, it ended the worker with Ray's words.
    _, returned = _execute("tests.train_functions:exits", {"x": 0.5, "code": 0})
    assert returned.outcome is Outcome.COMPLETE
    assert returned.error == ""
    _, plain = _execute("tests.train_functions:exits", {"x": 0.5, "code": None})
    assert plain.outcome is Outcome.COMPLETE
    for code in (3, "bad input"):
        _, failed = _execute("tests.train_functions:exits", {"x": 0.5, "code": code})
        assert failed.outcome is Outcome.FAIL
        assert failed.error.startswith(f"train called sys.exit({code!r}): ")
        assert "\n" not in failed.error


def test_a_trial_that_moves_its_process_leaves_the_next_one_where_hpsearch_ran(
    project: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    (project / "data.txt").write_text("0.25")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    for _ in range(2):  # one worker, two trials: the second reads the file where the first did
        _, end = _execute("tests.train_functions:moves_away", {"to": str(elsewhere)})
        assert end.outcome is Outcome.COMPLETE, end.error
        assert end.metrics == {"score": 0.25}
        assert Path.cwd() == project


def test_a_signal_handler_installed_off_the_main_thread_says_why_it_failed() -> None:
    # Ray Tune runs the function in a thread of its worker: here, a thread too.
    ends: list[WorkerEvent] = []
    thread = threading.Thread(
        target=lambda: ends.append(_execute("tests.train_functions:handles_sigterm", {"x": 1})[1])
    )
    thread.start()
    thread.join()
    [end] = ends
    assert end.outcome is Outcome.FAIL
    last = end.error.strip().splitlines()[-1]  # the line the progress and the summary show
    assert last.startswith("ValueError: signal only works in main thread")
    assert "runs in a thread of its worker, as under Ray Tune" in last
    assert "train: {command: ...}" in last


def test_a_trial_that_asks_the_search_to_stop_says_so_in_its_end() -> None:
    _, end = _execute("tests.train_functions:stops_search", {"x": 0.5})
    assert end.outcome is Outcome.COMPLETE
    assert end.end is not None
    assert end.end.stop_search == "x reached 0.5"
    _, plain = _execute("tests.train_functions:quick", {"x": 0.5, "steps": 1})
    assert plain.end is not None
    assert plain.end.stop_search == ""


@pytest.mark.process  # a script of its own
def test_a_scripts_objective_printed_only_as_text_is_read_from_its_output_at_its_end(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import json, sys\n"
        "print(json.dumps({'step': 0, 'loss': 0.5}))\n"  # a report, but not the objective
        "print('score: 0.25')\n"
        "print('│         score             │    ' + sys.argv[1] + '    │')\n"  # Lightning's
        "print('score=nan')\n"  # not a value
    )
    command = CommandSpec(command=[sys.executable, str(script), "{x}"])
    launch = make_launch({"x": 0.75}, command=command, trial_dir=str(tmp_path / "t"))
    out, err = tmp_path / "trial-3.stdout", tmp_path / "trial-3.stderr"
    end = _execute_captured(launch, out, err)
    assert end.outcome is Outcome.COMPLETE
    assert end.metrics == {"score": 0.75}  # its last value
    # Where the output was not captured, nothing is read: the driver says what is missing.
    bare = execute_trial(launch, assigned=HERE, send=lambda _: None)
    assert bare.outcome is Outcome.COMPLETE
    assert bare.metrics == {}
    # Logged with Python's logging, which writes to stderr.
    script.write_text(
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "logging.info('epoch 3: score: %s', sys.argv[1])\n"
    )
    out.unlink()
    logged = _execute_captured(launch, out, err)
    assert logged.metrics == {"score": 0.75}
    assert logged.end is not None
    assert logged.end.unread == ()


@pytest.mark.process  # a script of its own
def test_a_scripts_objective_printed_with_more_than_a_number_is_quoted_in_its_end(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(  # as PyTorch's MNIST example prints its accuracy, to stderr too
        "import sys\n"
        "for right in (9842, 9890):\n"
        "    print(f'Test set: Average loss: 0.03, score: {right}/10000 ({right / 100:.0f}%)')\n"
        "print('score: pending', file=sys.stderr)\n"
    )
    command = CommandSpec(command=[sys.executable, str(script)])
    launch = make_launch({}, command=command, trial_dir=str(tmp_path / "t"))
    out, err = tmp_path / "trial-3.stdout", tmp_path / "trial-3.stderr"
    end = _execute_captured(launch, out, err)
    assert end.outcome is Outcome.COMPLETE  # the driver fails it: no objective value
    assert end.metrics == {}
    assert end.end is not None
    # The last line of stdout (read first) that names it: what the failure makes a pattern of.
    assert end.end.unread == (("score", "Test set: Average loss: 0.03, score: 9890/10000 (99%)"),)


def test_the_chosen_gpu_is_named_to_cuda_by_its_uuid_where_nvml_reads_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # NVML's GPU 1 (a fake NVML's UUIDs: no GPU here). CUDA's own numbers may order GPUs
    # otherwise, and under the GPU's MPS daemon "1" names no device at all.
    uuids = ("GPU-8932f937-d72c", "GPU-5c1b3d27-0e3b")
    monkeypatch.setattr("hpsearch.telemetry._devices.local_gpu_uuids", lambda: uuids)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # what Ray gave the worker
    ray_gave = Assignment(cpus=1.0, gpus=1.0, gpu_ids=("0",), node_id="node", pid=7)

    placed = use_gpu(1, ray_gave)

    assert os.environ["CUDA_VISIBLE_DEVICES"] == "GPU-5c1b3d27-0e3b"
    assert (placed.gpu_ids, placed.ray_gpu_ids) == (("1",), ("0",))
    # Without NVML (logical GPUs): the index, as before.
    monkeypatch.setattr("hpsearch.telemetry._devices.local_gpu_uuids", lambda: ())
    use_gpu(1, ray_gave)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
