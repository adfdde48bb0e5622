"""Small training functions for tests; Ray workers import them as ``tests.train_functions:NAME``."""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import hpsearch
from hpsearch import TrialContext, TrialPruned

GATE_WAIT_S = 240.0


def quick(params: dict[str, Any], ctx: TrialContext) -> None:
    """Reports ``score`` rising with ``x`` over ``steps`` steps."""
    for step in range(int(params.get("steps", 3))):
        ctx.report(step, score=float(params["x"]) * (step + 1), speed=100.0 + step)


def timed(params: dict[str, Any], ctx: TrialContext) -> None:
    """Sleeps ``sleep`` seconds and reports when it ran and with what Ray gave it.

    With ``gate`` (a path) and ``hold_from`` (a trial number), trials from that number
    on then wait (up to ``GATE_WAIT_S``) for the file to exist before they report: a
    test holds a search in a state it must see, however slowly the machine runs."""
    started = time.time()
    time.sleep(float(params.get("sleep", 1.0)))
    gate = params.get("gate")
    if gate and ctx.trial_number >= int(params.get("hold_from", 0)):
        waited_until = time.monotonic() + GATE_WAIT_S
        while not Path(gate).exists() and time.monotonic() < waited_until:
            time.sleep(0.1)
    ctx.report(
        0,
        score=float(params["x"]),
        started=started,
        ended=time.time(),
        gpu=ctx.resources.get("GPU", 0.0),
    )


def failing(params: dict[str, Any], ctx: TrialContext) -> None:
    """Fails for ``x`` above 0.5, after one report."""
    ctx.report(0, score=float(params["x"]))
    if params["x"] > 0.5:
        raise RuntimeError(f"boom at x={params['x']:.3f}")


def prunable(params: dict[str, Any], ctx: TrialContext) -> None:
    """A score that ends higher for higher ``x``; obeys the pruner."""
    for step in range(int(params.get("steps", 6))):
        ctx.report(step, score=float(params["x"]) * (step + 1))
        if ctx.should_prune():
            raise TrialPruned()
        time.sleep(0.05)


def returns_value(params: dict[str, Any], ctx: TrialContext) -> float:
    """Reports nothing; returns the objective value."""
    return float(params["x"]) ** 2


def exits(params: dict[str, Any], ctx: TrialContext) -> None:
    """A script's ``main()`` made a function: reports, then ``sys.exit(params["code"])``."""
    ctx.report(0, score=float(params["x"]))
    sys.exit(params["code"])


def moves_away(params: dict[str, Any], ctx: TrialContext) -> float:
    """Reads ``data.txt`` where it starts, then moves the process (as a library may)."""
    value = float(Path("data.txt").read_text())
    os.chdir(params["to"])
    return value


def handles_sigterm(params: dict[str, Any], ctx: TrialContext) -> float:
    """Installs a SIGTERM handler, as a library that checkpoints on it does."""
    signal.signal(signal.SIGTERM, signal.getsignal(signal.SIGTERM))
    return float(params["x"])


def forgets_metric(params: dict[str, Any], ctx: TrialContext) -> None:
    """Reports a metric that is not the objective."""
    ctx.report(0, other=1.0)


def nan_objective(params: dict[str, Any], ctx: TrialContext) -> None:
    """Reports a NaN objective."""
    ctx.report(0, score=math.nan)


def behaves(params: dict[str, Any], ctx: TrialContext) -> Any:
    """One behaviour per trial number: report, raise, return a value, forget the objective."""
    mode = ctx.trial_number % 4
    if mode == 0:
        ctx.report(0, score=0.25)
        ctx.report(1, score=0.5)
    elif mode == 1:
        ctx.report(0, score=0.1)
        raise ValueError(f"trial {ctx.trial_number} went wrong")
    elif mode == 2:
        return {"score": 0.75, "extra": 1.0}
    else:
        ctx.report(0, other=1.0)
    return None


def two_objectives(params: dict[str, Any], ctx: TrialContext) -> None:
    """Accuracy against speed: ``x`` trades one for the other; ``handicap`` halves both.

    Sets its knobs with ``hpsearch.torch.configure`` (fp16 on a CPU becomes fp32)
    and times a few fake batches per step, so the meter's figures are reported too.
    """
    import torch

    from hpsearch.torch import configure

    setup = configure(params, ctx)
    factor = 0.5 if params["handicap"] else 1.0
    x = float(params["x"])
    for step in range(int(params.get("steps", 4))):
        for _ in setup.batches([torch.zeros(4, 2)] * 3):
            pass
        ctx.report(
            step,
            acc=factor * x * (step + 1) / 4,
            speed=factor * (150.0 - 100.0 * x),
        )
        if ctx.should_prune():
            raise TrialPruned(f"pruned at step {step}")
        time.sleep(0.05)


def fits_up_to(params: dict[str, Any], ctx: TrialContext) -> None:
    """Runs out of GPU memory (the real error type) after its first report when
    ``batch_size`` is above ``fits``; reports the batch and accumulation it ran with."""
    import torch

    ctx.report(0, score=0.0, batch=float(params["batch_size"]))
    if params["batch_size"] > params["fits"]:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    ctx.report(1, score=1.0, accumulation=float(params.get("grad_accum_steps", 1)))


def hangs(params: dict[str, Any], ctx: TrialContext) -> None:
    """Reports step 0, then hangs (a deadlock, a stuck collective) when ``x`` is above 0.5."""
    ctx.report(0, score=float(params["x"]))
    if float(params["x"]) > 0.5:
        time.sleep(3600)


def still(params: dict[str, Any], ctx: TrialContext) -> dict[str, float]:
    """Reports step 0, then, by ``how``: waits on an event no one sets (a deadlock), waits
    on a child that sleeps (a read with no timeout), or works ``work_s`` without a report
    (busy), or waits ``work_s`` on a lock by polling it (as ``filelock`` does)."""
    import subprocess
    import sys
    import threading

    ctx.report(0, score=float(params["x"]))
    how = params["how"]
    if how == "deadlock":
        threading.Event().wait()
    elif how == "child":
        subprocess.run([sys.executable, "-c", "import time; time.sleep(3600)"], check=False)
    end = time.monotonic() + float(params["work_s"])
    while time.monotonic() < end:
        if how == "busy":
            sum(range(1000))
        else:
            time.sleep(0.05)
    return {"score": float(params["x"])}


def returns_given(params: dict[str, Any], ctx: TrialContext) -> Any:
    """Returns ``given`` as it is (a string, a list: what a user's train may return)."""
    return params["given"]


def stuck(params: dict[str, Any], ctx: TrialContext) -> None:
    """Reports step 0, then, when ``x`` is above 0.5, gets stuck where no timer of its own
    can end it: ``how`` is ``sigstop`` (its process stops itself) or ``gil`` (a
    catastrophic regex, which holds the GIL for ever); or, with ``sleep``, hangs as
    :func:`hangs` does, where a stop reaches it."""
    import os
    import re
    import signal

    ctx.report(0, score=float(params["x"]))
    if float(params["x"]) <= 0.5:
        return
    if params["how"] == "sleep":
        time.sleep(3600)
    elif params["how"] == "sigstop":
        os.kill(os.getpid(), signal.SIGSTOP)
    else:
        re.match(r"(a+)+$", "a" * 64 + "b")


def dies(params: dict[str, Any], ctx: TrialContext) -> None:
    """Reports step 0, writes to stderr, then its process dies hard: ``how`` is ``exit``
    (``os._exit(3)``), ``kill`` (SIGKILL to itself) or ``segfault`` (``lives``: it does not)."""
    import ctypes
    import os
    import signal
    import sys

    ctx.report(0, score=float(params["x"]))
    if params["how"] == "lives":
        return
    print(f"trial {ctx.trial_number} about to die: {params['how']}", file=sys.stderr, flush=True)
    if params["how"] == "exit":
        os._exit(3)
    if params["how"] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    ctypes.string_at(0)  # segfault


def chatty(params: dict[str, Any], ctx: TrialContext) -> None:
    """Prints to stdout and stderr, as training scripts do, then reports."""
    print(f"epoch 0 of trial {ctx.trial_number}: loss 0.5", flush=True)
    print(f"warning from trial {ctx.trial_number}", file=sys.stderr, flush=True)
    ctx.report(0, score=float(params["x"]))


@hpsearch.fused(shared=("steps",))
def members_quick(members: list[hpsearch.Member]) -> list[dict[str, float]] | None:
    """Fused members: each reports ``x * step``; one with ``x > 0.8`` prunes itself at
    step 1; one asked to prune stops; ``fail`` fails them all; ``oom`` raises a CUDA OOM
    in a group (alone too with ``oom_alone``), ``oom_late`` after a first report."""
    steps = int(members[0].params.get("steps", 3))
    if members[0].params.get("fail"):
        raise RuntimeError("the group broke")
    if "exit" in members[0].params:
        for member in members:
            member.ctx.report(0, score=float(member.params["x"]))
        sys.exit(members[0].params["exit"])
    if any(m.params.get("oom") for m in members) and (
        len(members) > 1 or members[0].params.get("oom_alone")
    ):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    if members[0].params.get("oom_late"):
        members[0].ctx.report(0, score=0.0)
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    for step in range(steps):
        for member in members:
            if not member.active:
                continue
            x = float(member.params["x"])
            member.ctx.report(step, score=x * step)
            if x > 0.8 and step == 1:
                member.prune("too large")
            elif member.ctx.should_prune():
                member.prune(f"asked at step {step}")
    if members[0].params.get("wrong_return"):
        return [{"score": 1.0}]
    return [{"score": float(m.params["x"]) * 10} for m in members]


def logs_to_mlflow(params: dict[str, Any], ctx: TrialContext) -> None:
    """Code that logs to MLflow itself, as MLflow's users write it: calls with no run (MLflow
    opens one), or, with ``experiment``, its own experiment and run; fails with ``fail``;
    with ``silent``, logs its objective ``score`` to MLflow only, reporting nothing."""
    import mlflow

    if params.get("experiment"):
        mlflow.set_experiment(params["experiment"])
        with mlflow.start_run(run_name="own"):
            mlflow.log_metric("user_loss", float(params["x"]))
    else:
        mlflow.log_param("user_param", 7)
        mlflow.log_metric("user_loss", float(params["x"]), step=0)
    if params.get("fail"):
        raise RuntimeError("failed after logging")
    if params.get("silent"):  # its objective only in MLflow, each epoch, as its loop logs it
        for epoch in range(3):
            mlflow.log_metric("score", float(params["x"]) * (epoch + 1), step=epoch)
        return
    ctx.report(0, score=float(params["x"]))


def stops_search(params: dict[str, Any], ctx: TrialContext) -> None:
    """Reports, then asks the search to start no more trials."""
    ctx.report(0, score=float(params["x"]))
    ctx.stop_search(f"x reached {params['x']}")


def writes_framework_output(params: dict[str, Any], ctx: TrialContext) -> None:
    """Writes what a framework's default output folder would be (PyTorch Lightning's
    ``default_root_dir``, read from the environment as Lightning reads it) to ``seen``."""
    import json

    names = ("HPSEARCH_TRIAL_DIR", "PL_TRAINER_DEFAULT_ROOT_DIR")
    Path(params["seen"]).write_text(json.dumps({name: os.environ.get(name) for name in names}))
    ctx.report(0, score=1.0)


def writes_its_gpu(params: dict[str, Any], ctx: TrialContext) -> None:
    """Writes the GPU(s) CUDA would see (``CUDA_VISIBLE_DEVICES``) to ``seen``/x."""
    Path(params["seen"], str(params["x"])).write_text(os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    ctx.report(0, score=1.0)


def reports_its_gpu_memory(params: dict[str, Any], ctx: TrialContext) -> None:
    """Reports the memory the trial is told its GPU has (``ctx.gpu_memory_mb``)."""
    ctx.report(0, score=float(ctx.gpu_memory_mb or 0.0))
