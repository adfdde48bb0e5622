"""A training script run as a trial: its JSON lines are its reports, its end is the trial's."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from hpsearch import TrialContext
from hpsearch.adapters import CommandFailed, command_line, parse_line, run_command
from hpsearch.trial.protocol import Assignment, EventKind, Outcome, WorkerEvent
from hpsearch.trial.script import CommandSpec
from hpsearch.trial.text_metrics import TextMetrics
from hpsearch.worker import execute_trial
from tests.harness import make_launch, unactivated_environment

pytestmark = pytest.mark.process  # each test runs a script


def _script(folder: Path, body: str) -> str:
    path = folder / "script.py"
    path.write_text("import json, os, sys, time\n" + textwrap.dedent(body))
    return str(path)


def _run(
    tmp_path: Path, body: str, params: dict[str, Any], ctx: TrialContext, **spec: Any
) -> dict[str, float] | None:
    command = ["python", _script(tmp_path, body), "--x", "{x}"]
    return run_command(
        CommandSpec(command=command, **spec),
        params,
        ctx,
        workdir=str(tmp_path),
        trial_dir=str(tmp_path / "trial"),
    )


def test_json_lines_are_reports_and_the_rest_is_output(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    ctx = TrialContext.local(trial_number=4, seed=11, checkpoint_dir=str(tmp_path / "ckpt"))
    final = _run(
        tmp_path,
        """
        assert sys.argv[1:] == ["--x", "0.5"], sys.argv
        print("starting", flush=True)
        for step in range(3):
            print(json.dumps({"step": step, "score": step * float(sys.argv[2]), "samples": 100}))
        print(json.dumps({"best": 1.5, "note": "text is not a metric"}))
        env = os.environ
        print(json.dumps(dict(seed=env["HPSEARCH_SEED"], params=env["HPSEARCH_PARAMS"],
                              trial=env["HPSEARCH_TRIAL_NUMBER"],
                              dir=env["HPSEARCH_TRIAL_DIR"], cwd=os.getcwd(),
                              ckpt=env["HPSEARCH_CHECKPOINT_DIR"],
                              gpus=env["CUDA_VISIBLE_DEVICES"])))
        """,
        {"x": 0.5},
        ctx,
    )
    assert [(r.step, r.metrics["score"]) for r in ctx.history] == [(0, 0.0), (1, 0.5), (2, 1.0)]
    assert all(r.metrics["samples_per_sec"] > 0 for r in ctx.history)
    assert final == {"best": 1.5}
    out = capfd.readouterr().out.splitlines()
    assert out[0] == "starting"
    environment = json.loads(out[1])
    assert environment == {
        "seed": "11",
        "params": '{"x": 0.5}',
        "trial": "4",
        "dir": str(tmp_path / "trial"),
        "cwd": str(tmp_path),
        "ckpt": str(tmp_path / "ckpt"),
        "gpus": "",
    }


def test_metrics_can_come_from_a_file_the_script_appends_to(tmp_path: Path) -> None:
    ctx = TrialContext.local()
    final = _run(
        tmp_path,
        """
        with open(os.environ["HPSEARCH_METRICS_FILE"], "a") as out:
            for step in range(2):
                out.write(json.dumps({"step": step, "score": step}) + "\\n")
                out.flush()
                time.sleep(0.3)
            out.write(json.dumps({"score": 9}) + "\\n")
        print(json.dumps({"step": 7, "score": 7}))  # stdout is only output here
        """,
        {"x": 1},
        ctx,
        metrics="file-jsonl",
    )
    assert [(r.step, r.metrics["score"]) for r in ctx.history] == [(0, 0.0), (1, 1.0)]
    assert final == {"score": 9.0}


def test_a_script_told_its_metrics_file_by_a_flag_gets_the_trials_own(tmp_path: Path) -> None:
    # A script that takes where to write its metrics as a flag, unchanged: the command
    # names hpsearch's variable as a shell would (it runs without one).
    script = _script(
        tmp_path,
        """
        out = sys.argv[sys.argv.index("--metrics-out") + 1]
        with open(out, "a") as f:
            f.write(json.dumps({"step": 0, "score": float(sys.argv[-1])}) + "\\n")
        """,
    )
    ctx = TrialContext.local()
    spec = CommandSpec(
        command=f"python {script} --metrics-out $HPSEARCH_METRICS_FILE "
        "--n ${{HPSEARCH_TRIAL_NUMBER}}",  # a brace doubled, as any literal one
        metrics="file-jsonl",
    )
    run_command(spec, {}, ctx, workdir=str(tmp_path), trial_dir=str(tmp_path / "trial"))
    assert [(r.step, r.metrics) for r in ctx.history] == [(0, {"score": 0.0})]
    assert (tmp_path / "trial" / "metrics.jsonl").exists()
    variables = {"HPSEARCH_SEED": "7"}
    assert command_line(
        CommandSpec(command="prog --seed $HPSEARCH_SEED --cost $5 $HOME ${{oc.env:HPSEARCH_SEED}}"),
        {},
        variables=variables,
    )[1:] == ["--seed", "7", "--cost", "$5", "$HOME", "${oc.env:HPSEARCH_SEED}"]


def test_a_pruned_script_is_stopped_with_its_children_sigkill_after_the_grace(
    tmp_path: Path,
) -> None:
    ctx = TrialContext.local(prune_at=1)
    pids = tmp_path / "pids"
    started = time.monotonic()
    with pytest.raises(hpsearch_pruned()):
        _run(
            tmp_path,
            f"""
            import signal, subprocess
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a script that will not stop
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
            for step in range(100):
                print(json.dumps({{"step": step, "score": step}}), flush=True)
                time.sleep(0.2)
            """,
            {"x": 1},
            ctx,
            stop_grace=1,
        )
    took = time.monotonic() - started
    assert [r.step for r in ctx.history] == [0, 1]
    assert took < 10
    for pid in map(int, pids.read_text().split()):
        assert not _alive(pid), f"process {pid} outlived its pruned trial"


@pytest.mark.parametrize("ending", ["completes", "is pruned"])
def test_a_child_that_left_the_scripts_group_with_setsid_is_ended_too(
    tmp_path: Path, ending: str
) -> None:
    # Its own session (setsid), SIGTERM ignored, and its parent gone before the trial
    # ends: no group kill reaches it; the worker, its subreaper, finds and ends it.
    ctx = TrialContext.local(prune_at=1 if ending == "is pruned" else None)
    pid_file = tmp_path / "pid"
    escapee = (
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    )
    script = f"""
        import subprocess
        middle = subprocess.Popen([sys.executable, "-c", {escapee!r}], start_new_session=True)
        while not os.path.exists({str(pid_file)!r}):
            time.sleep(0.05)
        for step in range(3):
            print(json.dumps({{"step": step, "score": step}}), flush=True)
            time.sleep(0.3)
        """
    started = time.monotonic()
    try:
        _run(tmp_path, script, {"x": 1}, ctx, stop_grace=1)
    except hpsearch_pruned():
        assert ending == "is pruned"
    assert time.monotonic() - started < 15
    pid = int(pid_file.read_text())
    assert not _alive(pid), f"process {pid} outlived its trial"


def test_a_leftover_child_holding_stdout_does_not_keep_the_trial_open(tmp_path: Path) -> None:
    ctx = TrialContext.local()
    started = time.monotonic()
    final = _run(
        tmp_path,
        """
        import subprocess
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # inherits stdout
        print(json.dumps({"step": 0, "score": 1}))
        print(json.dumps({"score": 2}))
        """,
        {"x": 1},
        ctx,
    )
    assert final == {"score": 2.0}
    assert [r.step for r in ctx.history] == [0]
    assert time.monotonic() - started < 15


def test_a_failing_script_fails_the_trial_with_its_stderr(tmp_path: Path) -> None:
    with pytest.raises(CommandFailed) as info:
        _run(
            tmp_path,
            """
            print("loading data", file=sys.stderr)
            raise SystemExit("no such file: data.csv")
            """,
            {"x": 1},
            TrialContext.local(),
        )
    message = str(info.value)
    assert message.splitlines()[0] == "the command failed: exit code 1"
    assert "loading data" in message
    assert "no such file: data.csv" in message


def test_a_progress_bar_before_a_failure_is_quoted_as_its_last_drawing(tmp_path: Path) -> None:
    # tqdm draws on stderr, redrawing with carriage returns: 2000 drawings, one line.
    with pytest.raises(CommandFailed) as info:
        _run(
            tmp_path,
            """
            print("loading data", file=sys.stderr)
            for i in range(2000):
                sys.stderr.write(f"\\rEpoch 0: {i // 20:3d}%| {i}/2000 [loss={1 / (i + 1):.4f}]")
            sys.stderr.write("\\n")
            raise SystemExit("the data loader's worker died")
            """,
            {"x": 1},
            TrialContext.local(),
        )
    assert str(info.value).splitlines()[1:] == [
        "its last stderr lines:",
        "loading data",
        "Epoch 0:  99%| 1999/2000 [loss=0.0005]",
        "the data loader's worker died",
    ]


def test_a_script_out_of_gpu_memory_is_pruned_as_an_oom_by_the_worker(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        print(json.dumps({"step": 0, "score": 1}), flush=True)
        print("OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB", file=sys.stderr)
        sys.exit(1)
        """,
    )
    launch = make_launch(
        {"x": 1},
        number=2,
        command=CommandSpec(command=["python", script, "{x}"]),
        workdir=str(tmp_path),
        trial_dir=str(tmp_path / "trial"),
    )
    sent: list[WorkerEvent] = []
    end = execute_trial(launch, assigned=Assignment(cpus=1.0), send=sent.append)
    assert [e.kind for e in sent] == [EventKind.REPORT]
    assert end.outcome is Outcome.PRUNED
    assert end.end is not None
    assert end.end.oom is not None
    assert "CUDA out of memory" in end.end.oom.message


def test_placeholders_fill_from_params_and_python_is_this_interpreter() -> None:
    spec = CommandSpec(command="python train.py --lr {lr:.1e} --name 'run {act}' --wd {wd}")
    assert command_line(spec, {"lr": 0.001, "act": "relu", "wd": 0.5}) == [
        sys.executable,
        "train.py",
        "--lr",
        "1.0e-03",
        "--name",
        "run relu",
        "--wd",
        "0.5",
    ]
    with pytest.raises(KeyError, match="which this trial does not have"):
        command_line(spec, {"lr": 0.001, "act": "relu"})


def test_a_dotted_placeholder_is_the_parameter_of_that_name_as_hydra_overrides_name_them() -> None:
    spec = CommandSpec(command="python train.py optimizer.lr={optimizer.lr:.0e} seed={seed!r}")
    spec.check_placeholders({"optimizer.lr": object(), "seed": object()})
    assert command_line(spec, {"optimizer.lr": 0.01, "seed": "a"})[2:] == [
        "optimizer.lr=1e-02",
        "seed='a'",
    ]


def test_each_of_w_and_bs_argument_forms_expands_as_its_macro_does(tmp_path: Path) -> None:
    params = {"model.depth": 3, "amp": True, "tf32": False, "opt": "sgd"}

    def expanded(form: str) -> list[str]:
        return command_line(CommandSpec(command=f"prog {{{form}}}"), params, str(tmp_path))[1:]

    assert expanded("args") == ["--model.depth=3", "--amp=True", "--tf32=False", "--opt=sgd"]
    assert expanded("args_no_hyphens") == ["model.depth=3", "amp=True", "tf32=False", "opt=sgd"]
    assert expanded("args_no_equals") == [
        "--model.depth", "3", "--amp", "True", "--tf32", "False", "--opt", "sgd",
    ]  # fmt: skip
    assert expanded("args_no_boolean_flags") == ["--model.depth=3", "--amp", "--opt=sgd"]
    assert json.loads(expanded("args_json")[0]) == params
    [path] = expanded("args_json_file")
    assert Path(path).parent == tmp_path
    assert json.loads(Path(path).read_text()) == params
    # A parameter of the same name is a placeholder, as {args} already was.
    assert command_line(CommandSpec(command="prog {args_json}"), {"args_json": 1}) == ["prog", "1"]


def test_a_store_true_flag_given_a_value_by_args_is_told_the_form_that_passes_it(
    tmp_path: Path,
) -> None:
    script = _script(
        tmp_path,
        """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--amp", action="store_true")
        print(json.dumps({"step": 0, "amp": float(parser.parse_args().amp)}))
        """,
    )
    params = {"amp": False}
    with pytest.raises(CommandFailed) as failed:
        run_command(
            CommandSpec(command=f"python {script} {{args}}"),
            params,
            TrialContext.local(),
            workdir=str(tmp_path),
            trial_dir=str(tmp_path / "t"),
        )
    assert (
        str(failed.value)
        .splitlines()[-1]
        .endswith(
            "ignored explicit argument 'False'; --amp is a flag (action='store_true'), which "
            "takes no value: give the parameters with {args_no_boolean_flags} (--amp for true, "
            "nothing for false)"
        )
    )
    for amp in (False, True):  # what it says to write runs
        ctx = TrialContext.local()
        spec = CommandSpec(command=f"python {script} {{args_no_boolean_flags}}")
        run_command(spec, {"amp": amp}, ctx, workdir=str(tmp_path), trial_dir=str(tmp_path / "t"))
        assert ctx.history[0].metrics == {"amp": float(amp)}


def test_a_hydra_style_script_receives_its_overrides_from_args_no_hyphens(tmp_path: Path) -> None:
    # Hydra's overrides (key.sub=value), parsed as Hydra parses them: no --, no flags.
    script = _script(
        tmp_path,
        """
        overrides = dict(word.split("=", 1) for word in sys.argv[1:])
        assert not any(key.startswith("-") for key in overrides), overrides
        print(f"epoch=0 val_accuracy={float(overrides['optimizer.lr']) * 10}")
        """,
    )
    ctx = TrialContext.local()
    spec = CommandSpec(
        command=f"python {script} {{args_no_hyphens}}", metrics=TextMetrics(scalars=True)
    )
    params = {"optimizer.lr": 0.05, "model.layers": 2}
    run_command(spec, params, ctx, workdir=str(tmp_path), trial_dir=str(tmp_path / "t"))
    assert ctx.history[-1].metrics["val_accuracy"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("line", "step", "metrics"),
    [
        ('{"step": 3, "acc": 0.9}', 3, {"acc": 0.9}),
        ('{"acc": 1}', None, {"acc": 1.0}),
        # Nested, named as Tune names a nested result's: objective: {metric: val/acc}.
        (
            '{"step": 2, "train": {"loss": 0.5}, "val": {"acc": 0.9, "note": "x"}}',
            2,
            {
                "train/loss": 0.5,
                "val/acc": 0.9,
            },
        ),
        ('{"step": 1.5, "acc": 1}', "none", {}),
        ('{"step": 1, "flag": true}', "none", {}),
        ("epoch 3: acc 0.9", "none", {}),
        ("{not json", "none", {}),
    ],
)
def test_which_lines_are_reports(
    line: str, step: int | str | None, metrics: dict[str, float]
) -> None:
    report = parse_line(line)
    if step == "none":
        assert report is None
    else:
        assert report is not None
        assert (report.step, report.metrics) == (step, metrics)


def hpsearch_pruned() -> type[BaseException]:
    from hpsearch import TrialPruned

    return TrialPruned


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) is not running.
    status = Path(f"/proc/{pid}/stat").read_text().split()[2]
    return status != "Z"


_ = signal  # the module is used by the scripts' text


MNIST_LINE = (
    r"Test set: Average loss: (?P<val_loss>[\d.]+), "
    r"Accuracy: \d+/\d+ \((?P<val_accuracy>[\d.]+)%\)"
)


HF_TRAINER_LOGS = """
for epoch in (1.0, 2.0):
    print({"loss": 0.7 / epoch, "grad_norm": float("nan"), "learning_rate": 5e-05, "epoch": epoch})
    print("{'eval_loss': 0.5, 'eval_accuracy': np.float64(%s), 'epoch': %s}" % (0.4 * epoch, epoch))
print({"train_runtime": 12.5, "train_loss": 0.52, "epoch": 2.0})
"""
"""What Hugging Face's ``Trainer`` prints: ``str(logs)``, NumPy 2's ``np.float64(...)`` too."""


def test_the_dicts_a_hugging_face_trainer_prints_are_its_final_metrics(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    ctx = TrialContext.local(trial_number=0, seed=1, checkpoint_dir=str(tmp_path / "ckpt"))
    final = _run(tmp_path, HF_TRAINER_LOGS, {"x": 0.5}, ctx)
    assert final == {
        "loss": 0.35,
        "learning_rate": 5e-05,  # the NaN grad_norm is left out
        "epoch": 2.0,
        "eval_loss": 0.5,
        "eval_accuracy": 0.8,
        "train_runtime": 12.5,
        "train_loss": 0.52,
    }
    assert len(capfd.readouterr().out.splitlines()) == 5  # still the script's output
    # Scalars read the same lines as the text they are, each epoch a report.
    ctx = TrialContext.local(trial_number=1, seed=1, checkpoint_dir=str(tmp_path / "ckpt"))
    _run(tmp_path, HF_TRAINER_LOGS, {"x": 0.5}, ctx, metrics={"scalars": True, "step": "epoch"})
    assert [(r.step, r.metrics.get("eval_accuracy")) for r in ctx.history] == [
        (1, None),
        (1, 0.4),
        (2, None),
        (2, 0.8),
        (2, None),  # the train summary
    ]


def test_a_script_that_prints_text_reports_through_patterns(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    ctx = TrialContext.local()
    _run(
        tmp_path,
        """
        for epoch, (loss, right) in enumerate([(0.05, 9850), (0.0339, 9890)], start=1):
            print(f"Train Epoch: {epoch} [0/60000 (0%)]\\tLoss: 2.3", flush=True)
            print(f"Test set: Average loss: {loss:.4f}, Accuracy: {right}/10000 "
                  f"({100 * right / 10000:.0f}%)", flush=True)
        """,
        {"x": 1},
        ctx,
        metrics={"patterns": [MNIST_LINE]},
    )
    assert [(r.step, r.metrics) for r in ctx.history] == [
        (0, {"val_loss": 0.05, "val_accuracy": 98.0}),
        (1, {"val_loss": 0.0339, "val_accuracy": 99.0}),
    ]
    assert "Test set: Average loss: 0.0339" in capfd.readouterr().out  # still its output


def test_a_script_that_logs_to_stderr_reports_where_stderr_is_read(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Python's logging writes to stderr by default, in its own format.
    body = """
        import logging
        logging.basicConfig(level=logging.INFO)
        print("starting", flush=True)
        for epoch in range(3):
            logging.info("epoch=%d val_loss=%.2f", epoch, 1.0 / (epoch + 1))
        """
    read = TrialContext.local()
    _run(tmp_path, body, {"x": 1}, read, metrics={"scalars": True, "stderr": True, "step": "epoch"})
    assert [(r.step, r.metrics["val_loss"]) for r in read.history] == [
        (0, 1.0),
        (1, 0.5),
        (2, 0.33),
    ]
    assert "INFO:root:epoch=2 val_loss=0.33" in capfd.readouterr().err  # still its stderr
    unread = TrialContext.local()
    _run(tmp_path, body, {"x": 1}, unread, metrics={"scalars": True})
    assert unread.history == []  # stdout only, unless told


def test_what_a_script_logs_to_stderr_after_closing_its_stdout_is_read_to_the_end(
    tmp_path: Path,
) -> None:
    # Its stdout ends first, its stderr still has every report: the trial ended once the
    # script had exited and its stdout closed, its stderr's last reports unread (the
    # ones of a burst, as here, or any under load: make test lost a logging script's).
    body = """
        import logging
        logging.basicConfig(level=logging.INFO)
        sys.stdout.close()
        os.close(1)
        for epoch in range(3000):
            logging.info("epoch=%d val_loss=%.2f", epoch, 1.0 / (epoch + 1))
        """
    ctx = TrialContext.local()
    _run(tmp_path, body, {"x": 1}, ctx, metrics={"scalars": True, "stderr": True, "step": "epoch"})
    assert [r.step for r in ctx.history] == list(range(3000))


def test_a_pattern_that_never_matched_fails_the_trial_naming_it(tmp_path: Path) -> None:
    with pytest.raises(CommandFailed, match=r"patterns\[1\] .* never matched the script's output"):
        _run(
            tmp_path,
            'print("loss=0.5 acc=0.9")\n',
            {"x": 1},
            TrialContext.local(),
            metrics={"patterns": [r"acc=(?P<acc>[\d.]+)", r"speed (?P<samples_per_sec>\d+)"]},
        )


def test_args_passes_exactly_the_trials_parameters_to_an_argparse_script(tmp_path: Path) -> None:
    # A conditional space: this trial has momentum (sgd's branch), not beta (adam's).
    script = _script(
        tmp_path,
        """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--optimizer")
        parser.add_argument("--lr", type=float)
        parser.add_argument("--momentum", type=float)
        parser.add_argument("--beta", type=float)
        args = parser.parse_args()
        print(json.dumps({"step": 0, "lr": args.lr, "momentum": args.momentum,
                          "beta_given": float(args.beta is not None)}))
        """,
    )
    spec = CommandSpec(command=f"python {script} {{args}}")
    ctx = TrialContext.local()
    params = {"optimizer": "sgd", "lr": 0.01, "momentum": 0.9}
    assert command_line(spec, params)[2:] == ["--optimizer=sgd", "--lr=0.01", "--momentum=0.9"]
    run_command(spec, params, ctx, workdir=str(tmp_path), trial_dir=str(tmp_path / "t"))
    assert ctx.history[0].metrics == {"lr": 0.01, "momentum": 0.9, "beta_given": 0.0}
    with pytest.raises(ValueError, match="write \\{args\\} as an argument of its own"):
        CommandSpec(command="python t.py --all={args}").check_placeholders({"lr": 1})
    with pytest.raises(ValueError, match="write \\{args_json\\} as an argument of its own"):
        CommandSpec(command="python t.py --p={args_json}").check_placeholders({"lr": 1})
    CommandSpec(command="python t.py {args}").check_placeholders({"lr": 1})
    # Hydra's own interpolation is a literal brace: written doubled, it passes as it is.
    with pytest.raises(ValueError, match=r"names \{oc\.env\}.*a literal brace is written"):
        CommandSpec(command="t hydra.run.dir=${oc.env:D}").check_placeholders({"lr": 1})
    spec = CommandSpec(command="t hydra.run.dir=${{oc.env:D}}")
    spec.check_placeholders({"lr": 1})
    assert command_line(spec, {"lr": 1}) == ["t", "hydra.run.dir=${oc.env:D}"]


def test_a_program_beside_hpsearch_runs_with_its_environment_first_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = unactivated_environment(tmp_path / "env", monkeypatch)
    (env / "bin" / "sometool").write_text(  # reports whether its folder leads PATH
        '#!/bin/sh\ncase "$PATH" in "$(dirname "$0")":*) f=1;; *) f=0;; esac\n'
        'echo "{\\"step\\": 0, \\"first\\": $f}"\n'
    )
    ctx = TrialContext.local()
    run_command(
        CommandSpec(command=["sometool", "--x", "{x}"]),
        {"x": 1},
        ctx,
        workdir=str(tmp_path),
        trial_dir=str(tmp_path / "trial"),
    )
    assert [(r.step, r.metrics) for r in ctx.history] == [(0, {"first": 1.0})]


@pytest.mark.parametrize(
    ("line", "metrics"),
    [
        ("{'loss': 0.5, 'grad_norm': nan, 'x': -inf}", {"loss": 0.5, "x": float("-inf")}),
        ("{'f1': tensor(0.7, device='cuda:0'), 'n': np.int64(3)}", {"f1": 0.7, "n": 3.0}),
        ("{'a': __import__('os').getpid()}", None),  # read, never run
        ("{'name': 'adam'}", None),
    ],
)
def test_a_printed_python_dict_is_read_as_a_literal_and_never_run(
    line: str, metrics: dict[str, float] | None
) -> None:
    report = parse_line(line, python=True)
    assert (report.metrics if report is not None else None) == metrics
    assert parse_line(line) is None  # a JSON line only, where scalars read the text
