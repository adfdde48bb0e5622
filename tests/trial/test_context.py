"""TrialContext: what a training function can do with it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hpsearch import TrialContext
from hpsearch.telemetry import GpuLoad
from hpsearch.trial.context import TrialIdentity
from hpsearch.trial.protocol import KnobReport


def test_local_context_records_reports() -> None:
    ctx = TrialContext.local(trial_number=7)
    ctx.report(0, loss=np.float32(0.5), acc=torch.tensor(0.75))
    ctx.report(1, loss=0.25)
    assert ctx.trial_number == 7
    assert ctx.device == "cpu"
    assert [(h.step, h.metrics) for h in ctx.history] == [
        (0, {"loss": 0.5, "acc": 0.75}),
        (1, {"loss": 0.25}),
    ]
    assert ctx.latest_metrics == {"loss": 0.25, "acc": 0.75}
    assert ctx.last_step == 1


@pytest.mark.parametrize("step", [-1, 1.5, True, "3"])
def test_bad_steps(step: object) -> None:
    with pytest.raises(ValueError, match="step must be a non-negative integer"):
        TrialContext.local().report(step, loss=1.0)  # type: ignore[arg-type]


def test_metrics_may_come_as_one_dict_after_the_step() -> None:
    ctx = TrialContext.local()
    ctx.report(0, {"acc@1": 0.9, "loss": np.float32(0.5)}, lr=0.1)
    assert ctx.history[0].metrics == {"acc@1": 0.9, "loss": 0.5, "lr": 0.1}
    # As tune.report takes them (no step): the step comes first.
    with pytest.raises(TypeError, match=r"ctx.report\(epoch, metrics\) for a dict"):
        ctx.report({"loss": 0.3})
    with pytest.raises(TypeError, match=r"as one dict or by name.*got 0.5"):
        ctx.report(1, 0.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="as one dict or by name"):
        ctx.report(1, {"a": 1.0}, {"b": 2.0})


def test_the_step_may_come_by_name_as_mlflow_and_wandb_take_it() -> None:
    ctx = TrialContext.local()
    ctx.report({"loss": 0.5, "acc@1": 0.8}, step=0)  # mlflow.log_metrics(metrics, step=0)
    ctx.report(step=1, loss=0.25)
    ctx.report({"loss": 0.125}, step=2, lr=0.01)
    assert [(h.step, h.metrics) for h in ctx.history] == [
        (0, {"loss": 0.5, "acc@1": 0.8}),
        (1, {"loss": 0.25}),
        (2, {"loss": 0.125, "lr": 0.01}),
    ]
    with pytest.raises(TypeError, match=r"needs the step: ctx.report\(epoch, loss=0.3\)"):
        ctx.report(loss=0.3)
    with pytest.raises(ValueError, match="step must be a non-negative integer, got -1"):
        ctx.report({"loss": 0.3}, step=-1)


def test_optunas_order_of_value_and_step_is_named() -> None:
    with pytest.raises(ValueError, match=r"got 0.93; .*Optuna's order is report\(value, step\)"):
        TrialContext.local().report(0.93, 5)  # type: ignore[arg-type]


def test_bad_metrics() -> None:
    ctx = TrialContext.local()
    with pytest.raises(TypeError, match="must be a real number"):
        ctx.report(0, loss="low")
    with pytest.raises(TypeError, match="must be a real number"):
        ctx.report(0, flag=True)
    with pytest.raises(ValueError, match="at least one metric"):
        ctx.report(0)
    with pytest.raises(ValueError, match="metric's name is empty"):
        ctx.report(0, **{"": 1.0})
    ctx.report(0, **{"acc@1": 0.9, "val:acc": 0.8})  # any name, as Tune takes it
    assert ctx.latest_metrics == {"acc@1": 0.9, "val:acc": 0.8}


def test_nan_is_recorded_as_is() -> None:
    ctx = TrialContext.local()
    ctx.report(0, loss=float("nan"))
    assert math.isnan(ctx.history[0].metrics["loss"])


def test_should_prune_follows_the_oracle_after_a_report() -> None:
    asked: list[int] = []

    def oracle(step: int) -> bool:
        asked.append(step)
        return step >= 2

    class Nowhere:
        def report(self, step: int, metrics: dict[str, float]) -> None:
            pass

        def gpu_load(self, load: GpuLoad) -> None:
            pass

        def knobs(self, knobs: KnobReport) -> None:
            pass

    ctx = TrialContext(trial=TrialIdentity(0), device="cpu", channel=Nowhere(), prune_oracle=oracle)
    assert ctx.should_prune() is False  # nothing reported yet, the oracle is not asked
    ctx.report(1, loss=1.0)
    assert ctx.should_prune() is False
    ctx.report(2, loss=1.0)
    assert ctx.should_prune() is True
    assert asked == [1, 2]


def test_no_pruner_never_prunes() -> None:
    ctx = TrialContext.local()
    ctx.report(5, loss=1.0)
    assert ctx.should_prune() is False


def test_simulated_gpu_load_is_checked_and_recorded() -> None:
    ctx = TrialContext.local()
    ctx.simulate_gpu_load(11.4, 167)
    assert ctx.gpu_loads == [(11.4, 167.0)]
    with pytest.raises(ValueError, match="within 0-100"):
        ctx.simulate_gpu_load(120, 10)
    with pytest.raises(ValueError, match="memory_mb"):
        ctx.simulate_gpu_load(10, -1)
