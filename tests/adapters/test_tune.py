"""A Ray Tune function trainable, unchanged: its reports and checkpoints through hpsearch's."""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path
from typing import Any, ClassVar

import pytest
from ray import tune
from ray.tune import Checkpoint

from hpsearch import TrialContext, TrialPruned
from hpsearch.adapters import asked_resources, nested, tune_train
from hpsearch.config import load_config


def trainable(config: dict[str, Any]) -> None:
    """As Ray's docs write one: resume from the checkpoint, report one with each epoch."""
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            start = json.loads((Path(folder) / "state.json").read_text())["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "state.json").write_text(json.dumps({"epoch": epoch}))
            score = config["model"]["scale"] * (epoch + 1)
            tune.report(
                {"score": score, "note": "text"}, checkpoint=Checkpoint.from_directory(folder)
            )


def test_reports_and_checkpoints_go_through_the_trials_and_a_rerun_resumes(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    first = TrialContext.local(checkpoint_dir=str(folder))
    tune_train(trainable)({"epochs": 2, "model.scale": 0.5}, first)

    assert [(r.step, r.metrics) for r in first.history] == [
        (0, {"score": 0.5}),
        (1, {"score": 1.0}),
    ]
    assert json.loads((folder / "state.json").read_text()) == {"epoch": 1}  # the last one, whole

    again = TrialContext.local(checkpoint_dir=str(folder))
    tune_train(trainable)({"epochs": 4, "model.scale": 0.5}, again)
    # tune.get_checkpoint() gave the trial's folder back: it went on from epoch 2.
    assert [r.metrics["score"] for r in again.history] == [1.5, 2.0]


def test_the_pruners_verdict_stops_the_trainable_at_its_report(tmp_path: Path) -> None:
    ctx = TrialContext.local(checkpoint_dir=str(tmp_path), prune_at=1)
    with pytest.raises(TrialPruned, match="pruned after report 2"):
        tune_train(trainable)({"epochs": 5, "model.scale": 1.0}, ctx)
    assert [r.step for r in ctx.history] == [0, 1]


def test_dotted_names_are_the_nested_config_a_param_space_gives() -> None:
    assert nested({"lr": 0.1, "model.width": 64, "model.act.name": "relu"}) == {
        "lr": 0.1,
        "model": {"width": 64, "act": {"name": "relu"}},
    }


def test_a_returned_dict_is_the_final_result_its_numbers_the_metrics(tmp_path: Path) -> None:
    def old_style(config: dict[str, Any]) -> dict[str, Any]:
        return {"score": config["x"] * 2, "note": "not a metric"}

    ctx = TrialContext.local(checkpoint_dir=str(tmp_path))
    assert tune_train(old_style)({"x": 1.5}, ctx) == {"score": 3.0}


def test_the_trial_folder_tune_gives_is_the_trials_own_which_is_kept(tmp_path: Path) -> None:
    # Ray's examples save artifacts in get_trial_dir(); Ray's own is in its session
    # folder, which goes when the search ends.
    def saves_an_artifact(config: dict[str, Any]) -> None:
        folder = tune.get_context().get_trial_dir()
        Path(folder, "predictions.csv").write_text(f"{config['x']}\n")
        tune.report({"score": 1.0})

    ctx = TrialContext.local(checkpoint_dir=str(tmp_path / "checkpoints"))
    tune_train(saves_an_artifact, trial_dir=str(tmp_path / "trial-3"))({"x": 2}, ctx)
    assert (tmp_path / "trial-3" / "predictions.csv").read_text() == "2\n"


class Counter(tune.Trainable):
    """A class trainable as Ray's examples write one: state in setup, one step a report."""

    saved_at: ClassVar[list[int]] = []
    """The iterations its checkpoints were saved at, across instances."""

    def setup(self, config: dict[str, Any]) -> None:
        self.total = 0.0
        self.rate = config["model"]["rate"]
        Path(self.logdir, "setup").write_text("ran")

    def step(self) -> dict[str, Any]:
        self.total += self.rate
        return {"total": self.total, "seen": self.iteration, "done": self.total >= 100}

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any]:
        Counter.saved_at.append(self.iteration)
        return {"total": self.total}

    def load_checkpoint(self, checkpoint: dict[str, Any] | None) -> None:
        assert checkpoint is not None  # what save_checkpoint returned
        self.total = checkpoint["total"]

    def cleanup(self) -> None:
        Path(self.logdir, "cleanup").write_text("ran")


def test_numpy_numbers_and_0d_arrays_are_metrics_and_steps_as_ctx_report_takes_them(
    tmp_path: Path,
) -> None:
    import numpy as np

    def numpy_results(config: dict[str, Any]) -> dict[str, Any]:
        losses = np.array([0.5, 0.25], dtype=np.float32)
        for epoch in range(2):
            tune.report(
                {
                    "loss": losses[: epoch + 1].mean(),
                    "epoch": np.int64(epoch + 3),
                    "acc": np.array(0.75),  # 0-d: read by its item(), as a 0-d tensor is
                    "sizes": [1, 2],
                }
            )
        return {"loss": np.float32(0.125), "flag": np.bool_(True), "done": True}

    ctx = TrialContext.local(checkpoint_dir=str(tmp_path))
    returned = tune_train(numpy_results)({}, ctx)
    assert [(r.step, r.metrics) for r in ctx.history] == [
        (3, {"loss": 0.5, "epoch": 3.0, "acc": 0.75}),
        (4, {"loss": 0.375, "epoch": 4.0, "acc": 0.75}),
    ]
    assert returned == {"loss": 0.125}  # a boolean is no metric


def test_a_metric_named_step_is_the_reports_step_and_a_metric_as_under_tune(
    tmp_path: Path,
) -> None:
    class Counting(tune.Trainable):  # as Ray's custom_checkpointing_with_callback example
        def setup(self, config: dict[str, Any]) -> None:
            self.current_step = 0

        def step(self) -> dict[str, Any]:
            self.current_step += 1
            return {"mean_loss": 1 / self.current_step, "step": self.current_step}

    ctx = TrialContext.local(checkpoint_dir=str(tmp_path / "class"))
    tune_train(Counting, stop={"training_iteration": 2})({}, ctx)
    assert [(r.step, r.metrics["mean_loss"], r.metrics["step"]) for r in ctx.history] == [
        (1, 1.0, 1.0),
        (2, 0.5, 2.0),
    ]

    def reports_step(config: dict[str, Any]) -> None:
        for i in range(2):
            tune.report({"step": i, "loss": i / 2})

    ctx = TrialContext.local(checkpoint_dir=str(tmp_path / "function"))
    tune_train(reports_step)({}, ctx)
    assert [(r.step, r.metrics) for r in ctx.history] == [
        (0, {"step": 0.0, "loss": 0.0}),
        (1, {"step": 1.0, "loss": 0.5}),
    ]


def test_nested_metrics_are_named_as_tune_names_them_in_reports_stop_and_the_return(
    tmp_path: Path,
) -> None:
    def nested_results(config: dict[str, Any]) -> dict[str, Any]:
        for epoch in range(5):
            tune.report({"val": {"acc": 0.25 * epoch, "set": "dev"}, "epoch": epoch})
        return {"test": {"acc": 0.5}}

    ctx = TrialContext.local(checkpoint_dir=str(tmp_path))
    returned = tune_train(nested_results, stop={"val/acc": 0.5})({}, ctx)
    assert returned is None  # stopped, completed, at the report that met val/acc 0.5
    assert [(r.step, r.metrics) for r in ctx.history] == [
        (0, {"val/acc": 0.0, "epoch": 0.0}),
        (1, {"val/acc": 0.25, "epoch": 1.0}),
        (2, {"val/acc": 0.5, "epoch": 2.0}),
    ]
    ended = TrialContext.local(checkpoint_dir=str(tmp_path / "ended"))
    assert tune_train(nested_results)({}, ended) == {"test/acc": 0.5}


def test_a_class_trainable_steps_until_stop_checkpoints_and_a_rerun_resumes_it(
    tmp_path: Path,
) -> None:
    folder, trial_dir = tmp_path / "checkpoints", tmp_path / "trial"
    run = tune_train(
        Counter, stop={"training_iteration": 4}, checkpoint_frequency=3, trial_dir=str(trial_dir)
    )
    first = TrialContext.local(checkpoint_dir=str(folder))
    Counter.saved_at.clear()
    assert run({"model.rate": 1.5}, first) is None  # completed, at the stop
    # One report a step, at Tune's training_iteration, with what step() returned; Tune's
    # auto-filled times too, not its pid, timestamp and config (the params: model/rate).
    assert [(r.step, r.metrics["total"], r.metrics["seen"]) for r in first.history] == [
        (1, 1.5, 0), (2, 3.0, 1), (3, 4.5, 2), (4, 6.0, 3),
    ]  # fmt: skip
    assert {"time_this_iter_s", "time_total_s"} <= set(first.history[0].metrics)
    assert not {"pid", "timestamp", "done"} & set(first.history[0].metrics)
    assert not [name for name in first.history[0].metrics if name.startswith("config")]
    # Saved at step 3 (the frequency) and at its end; setup and cleanup ran in its logdir,
    # which is in the trial's own folder.
    assert Counter.saved_at == [3, 4]
    assert json.loads((folder / ".hpsearch_trainable.json").read_text())["training_iteration"] == 4
    [logdir] = trial_dir.iterdir()
    assert {p.name for p in logdir.iterdir()} == {"setup", "cleanup"}

    again = TrialContext.local(checkpoint_dir=str(folder))
    tune_train(Counter, stop={"training_iteration": 6})({"model.rate": 1.5}, again)
    # Restored at iteration 4 with its total: it went on from there, as under Tune.
    assert [(r.step, r.metrics["total"], r.metrics["seen"]) for r in again.history] == [
        (5, 7.5, 4), (6, 9.0, 5),
    ]  # fmt: skip


def test_a_class_trainable_ends_when_a_result_says_done_or_the_pruner_stops_it(
    tmp_path: Path,
) -> None:
    ctx = TrialContext.local(checkpoint_dir=str(tmp_path / "done"))
    tune_train(Counter, trial_dir=str(tmp_path / "a"))({"model.rate": 40.0}, ctx)
    assert [r.metrics["total"] for r in ctx.history] == [40.0, 80.0, 120.0]  # done at 120
    assert (tmp_path / "done" / ".hpsearch_trainable.json").exists()  # a checkpoint at its end

    pruned = TrialContext.local(checkpoint_dir=str(tmp_path / "pruned"), prune_at=2)
    with pytest.raises(TrialPruned):
        tune_train(Counter, trial_dir=str(tmp_path / "b"))({"model.rate": 1.0}, pruned)
    assert [r.step for r in pruned.history] == [1, 2]
    [logdir] = (tmp_path / "b").iterdir()
    assert (logdir / "cleanup").exists()  # stopped: its cleanup ran


def test_stop_ends_a_function_trainable_completed_at_the_report_that_meets_it(
    tmp_path: Path,
) -> None:
    def endless(config: dict[str, Any]) -> None:
        epoch = 0
        while True:
            try:
                tune.report({"loss": 1.0 / (epoch + 1), "epoch": epoch})
            except Exception:  # a trainable's own handler does not keep it going
                raise AssertionError("stop went through an except Exception") from None
            epoch += 1

    by_count = TrialContext.local(checkpoint_dir=str(tmp_path / "a"))
    tune_train(endless, stop={"training_iteration": 3})({}, by_count)
    assert [r.step for r in by_count.history] == [0, 1, 2]  # three reports
    by_metric = TrialContext.local(checkpoint_dir=str(tmp_path / "b"))
    # A criterion never reported is said once, as Tune says it, and never stops the trial.
    with pytest.warns(UserWarning, match="'never' is not among the metrics") as said:
        tune_train(endless, stop={"epoch": 5, "never": 1e9})({}, by_metric)
    assert [r.step for r in by_metric.history] == [0, 1, 2, 3, 4, 5]
    assert len(said) == 1


def test_a_function_trainable_that_reports_done_ends_there_completed(tmp_path: Path) -> None:
    def until_done(config: dict[str, Any]) -> None:  # as Ray's pbt_function loops (forever)
        accuracy = 0.0
        for _ in range(10):
            accuracy += 1.0
            tune.report({"mean_accuracy": accuracy, "done": accuracy >= 3})

    ctx = TrialContext.local(checkpoint_dir=str(tmp_path))
    assert tune_train(until_done)({}, ctx) is None  # completed
    assert [r.metrics["mean_accuracy"] for r in ctx.history] == [1.0, 2.0, 3.0]


def test_a_stop_on_done_as_tunes_examples_write_it_is_met_by_the_report_that_says_done(
    tmp_path: Path,
) -> None:
    # Ray's examples stop on {"done": True, "training_iteration": N}: Tune adds "done" to
    # every result and compares result[key] >= value, so neither is an unreported metric.
    def until_done(config: dict[str, Any]) -> None:
        for step in range(10):
            tune.report({"score": float(step), "finished": step >= 1, "done": step >= 2})

    ctx = TrialContext.local(checkpoint_dir=str(tmp_path / "a"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "'done' is not among the metrics"
        tune_train(until_done, stop={"done": True, "training_iteration": 10})({}, ctx)
    assert [r.metrics["score"] for r in ctx.history] == [0.0, 1.0, 2.0]
    by_flag = TrialContext.local(checkpoint_dir=str(tmp_path / "b"))
    tune_train(until_done, stop={"finished": True})({}, by_flag)  # a flag of its own
    assert [r.metrics["score"] for r in by_flag.history] == [0.0, 1.0]
    config = load_config(
        {
            "study": {"name": "s", "n_trials": 1},
            "objective": {"metric": "score", "direction": "maximize"},
            "train": {"tune": "tests.tune_trainables:one_cpu", "stop": {"done": True}},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        }
    )
    assert config.tune_settings is not None
    assert config.tune_settings.stop == {"done": True}


def test_what_a_class_trainable_asks_through_with_resources_is_read() -> None:
    assert asked_resources(Counter) == {}
    asked = tune.with_resources(Counter, {"cpu": 3, "gpu": 0.5})
    assert asked_resources(asked) == {"CPU": 3.0, "GPU": 0.5}
