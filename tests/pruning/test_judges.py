"""Pruning rules judged in the driver: Optuna's pruners, the primary objective, dominance."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch import attrs
from hpsearch.config import ObjectiveSpec, PrunerSpec
from hpsearch.errors import ConfigError
from hpsearch.pruning import (
    DominatedJudge,
    PrimaryObjectiveJudge,
    check_pruner,
    make_judge,
    make_pruner,
    stored_intermediate,
)

ACCURACY = ObjectiveSpec(metric="acc", direction="maximize")
SPEED = ObjectiveSpec(metric="speed", direction="maximize")
LOSS = ObjectiveSpec(metric="loss", direction="minimize")


def _study(directions: int) -> optuna.Study:
    return optuna.create_study(directions=["maximize"] * directions)


def _run(judge: object, study: optuna.Study, steps: list[dict[str, float]]) -> list[bool]:
    """Report ``steps`` for a new trial; finish it complete unless pruned; return the verdicts."""
    trial = study.ask()
    verdicts = []
    for step, metrics in enumerate(steps):
        verdict = judge.judge(trial, step, metrics)  # type: ignore[attr-defined]
        verdicts.append(verdict.prune)
        if verdict.prune:
            study.tell(trial, state=TrialState.PRUNED)
            judge.finished(trial, TrialState.PRUNED, [])  # type: ignore[attr-defined]
            return verdicts
    values = list(steps[-1].values())
    study.tell(trial, values)
    judge.finished(trial, TrialState.COMPLETE, values)  # type: ignore[attr-defined]
    return verdicts


def test_dominated_rule_prunes_only_what_is_beaten_everywhere() -> None:
    study = _study(2)
    judge = make_judge(
        PrunerSpec(type="dominated", options={"n_startup_trials": 1}), [ACCURACY, SPEED], study
    )
    assert isinstance(judge, DominatedJudge)
    assert _run(judge, study, [{"acc": 0.8, "speed": 100.0}] * 3) == [False] * 3
    # Slower but more accurate: not dominated, goes on.
    assert _run(judge, study, [{"acc": 0.9, "speed": 50.0}] * 3) == [False] * 3
    # Worse on both at step 0: pruned there, with the trial that beats it named.
    trial = study.ask()
    verdict = judge.judge(trial, 0, {"acc": 0.5, "speed": 40.0})
    assert verdict.prune
    assert verdict.reason.startswith("dominated at step 0 by 2 trial(s) on every objective")
    assert "trial 0: acc 0.8 vs 0.5, speed 100 vs 40" in verdict.reason
    # Equal on every objective is not dominated.
    assert not judge.judge(study.ask(), 0, {"acc": 0.8, "speed": 100.0}).prune
    # Without every objective at the step there is nothing to judge.
    assert not judge.judge(study.ask(), 0, {"acc": 0.1}).prune


def test_dominated_rule_respects_startup_warmup_and_directions() -> None:
    study = _study(2)
    rule = PrunerSpec(
        type="dominated",
        options={"n_startup_trials": 2, "n_warmup_steps": 1, "min_dominating": 1},
    )
    judge = make_judge(rule, [ACCURACY, LOSS], study)
    assert judge is not None
    _run(judge, study, [{"acc": 0.9, "loss": 0.1}] * 3)
    # One trial finished: still in start-up.
    assert not judge.judge(study.ask(), 1, {"acc": 0.5, "loss": 0.5}).prune
    _run(judge, study, [{"acc": 0.9, "loss": 0.1}] * 3)
    trial = study.ask()
    assert not judge.judge(trial, 0, {"acc": 0.5, "loss": 0.5}).prune  # warm-up step
    assert judge.judge(trial, 1, {"acc": 0.5, "loss": 0.5}).prune
    # Lower loss is better: a trial with a lower loss than everyone is not dominated.
    assert not judge.judge(study.ask(), 1, {"acc": 0.5, "loss": 0.01}).prune


def test_primary_rule_runs_an_optuna_pruner_on_the_first_objective() -> None:
    study = _study(2)
    spec = PrunerSpec(type="median", options={"n_startup_trials": 2, "n_warmup_steps": 0})
    judge = make_judge(spec, [ACCURACY, SPEED], study)
    assert isinstance(judge, PrimaryObjectiveJudge)
    for acc in (0.8, 0.9):
        _run(judge, study, [{"acc": acc, "speed": 1.0}] * 3)
    trial = study.ask()
    # Much faster, but the primary objective trails the median: pruned.
    verdict = judge.judge(trial, 0, {"acc": 0.2, "speed": 1000.0})
    assert verdict.prune
    assert verdict.reason.startswith("primary objective acc: acc 0.2 at step 0 (best so far)")
    assert "below the median 0.85 of 2 completed trial(s)" in verdict.reason
    assert trial.user_attrs[f"{attrs.INTERMEDIATE}.0"] == {"acc": 0.2}  # a row per step
    # Optuna's own record, for plot_intermediate_values and optuna-dashboard.
    frozen = study.trials[trial.number]
    assert frozen.intermediate_values == {0: 0.2}
    assert stored_intermediate(frozen) == {0: {"acc": 0.2}}


def test_primary_rule_rebuilds_its_history_when_a_search_resumes() -> None:
    study = _study(2)
    spec = PrunerSpec(type="median", options={"n_startup_trials": 2, "n_warmup_steps": 0})
    judge = make_judge(spec, [ACCURACY, SPEED], study)
    for acc in (0.8, 0.9):
        _run(judge, study, [{"acc": acc, "speed": 1.0}] * 2)
    resumed = make_judge(spec, [ACCURACY, SPEED], study)  # a new driver, same storage
    assert resumed is not None
    assert resumed.judge(study.ask(), 1, {"acc": 0.1, "speed": 1.0}).prune


def test_single_objective_uses_the_studys_pruner_and_explains() -> None:
    study = optuna.create_study(
        direction="minimize",
        pruner=optuna.pruners.PercentilePruner(25.0, n_startup_trials=2, n_warmup_steps=0),
    )
    spec = PrunerSpec(type="percentile", options={"percentile": 25.0})
    judge = make_judge(spec, [LOSS], study)
    assert judge is not None
    for loss in (0.1, 0.2):
        trial = study.ask()
        for step in range(2):
            assert not judge.judge(trial, step, {"loss": loss}).prune
        study.tell(trial, loss)
    verdict = judge.judge(study.ask(), 1, {"loss": 0.9})
    assert verdict.prune
    assert "loss 0.9 at step 1 (best so far) is above the 25th percentile 0.125 of 2" in (
        verdict.reason
    )
    assert not judge.judge(study.ask(), 1, {"other": 0.9}).prune  # objective not reported


def test_no_pruner_no_judge_and_options_are_checked() -> None:
    assert make_judge(PrunerSpec(), [ACCURACY], _study(1)) is None
    with pytest.raises(ConfigError, match="min_dominatng"):
        check_pruner(PrunerSpec(type="dominated", options={"min_dominatng": 2}), "c.yaml")
    with pytest.raises(ConfigError, match="min_dominating must be >= 1"):
        check_pruner(PrunerSpec(type="dominated", options={"min_dominating": 0}), "c.yaml")


def test_successive_halving_explains_its_rung() -> None:
    study = optuna.create_study(
        direction="maximize",
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2),
    )
    spec = PrunerSpec(type="successive_halving", options={"min_resource": 1, "reduction_factor": 2})
    judge = make_judge(spec, [ACCURACY], study)
    assert judge is not None
    verdicts = []
    for acc in (0.9, 0.8, 0.7, 0.2):
        trial = study.ask()
        verdict = judge.judge(trial, 1, {"acc": acc})
        verdicts.append(verdict)
        if verdict.prune:
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, acc)
    assert verdicts[-1].prune
    assert verdicts[-1].reason == (
        "acc 0.2 at step 1 is not in the top 1/2 of the trials that reached this rung "
        "(SuccessiveHalvingPruner)"
    )


def test_optunas_threshold_pruner_stops_a_diverging_trial_and_explains() -> None:
    spec = PrunerSpec(type="threshold", options={"upper": 10.0})
    study = optuna.create_study(direction="minimize", pruner=make_pruner(spec, "c.yaml"))
    judge = make_judge(spec, [LOSS], study)
    assert judge is not None
    trial = study.ask()
    assert not judge.judge(trial, 0, {"loss": 2.0}).prune
    verdict = judge.judge(trial, 1, {"loss": 12.5})
    assert verdict.prune
    assert verdict.reason == "loss 12.5 at step 1 is outside [-inf, 10] (ThresholdPruner)"
    wilcoxon = make_pruner(PrunerSpec(type="wilcoxon", options={"p_threshold": 0.05}), "c.yaml")
    assert isinstance(wilcoxon, optuna.pruners.WilcoxonPruner)


def test_optunas_patient_pruner_wraps_the_pruner_its_section_names_and_explains() -> None:
    spec = PrunerSpec(
        type="patient",
        options={
            "patience": 2,
            "wrapped_pruner": {"type": "median", "options": {"n_startup_trials": 1}},
        },
    )
    study = optuna.create_study(direction="maximize", pruner=make_pruner(spec, "c.yaml"))
    judge = make_judge(spec, [ACCURACY], study)
    assert judge is not None
    assert _run(judge, study, [{"acc": 0.5 + 0.1 * step} for step in range(5)]) == [False] * 5
    # Below the median from its first step, but improving: patience keeps it.
    assert _run(judge, study, [{"acc": 0.1 * step} for step in range(5)]) == [False] * 5
    # Below the median, and its last three reports short of its best before them.
    trial = study.ask()
    verdicts = [judge.judge(trial, k, {"acc": a}) for k, a in enumerate((0.2, 0.4, 0.3, 0.3, 0.3))]
    assert [v.prune for v in verdicts] == [False, False, False, False, True]
    assert verdicts[-1].reason == (
        "acc 0.3 at step 4: its last 3 reports fell short of its best before them "
        "(PatientPruner, patience 2, and MedianPruner agreed)"
    )
    # Its type alone, or none: patience alone.
    alone = make_pruner(PrunerSpec(type="patient", options={"patience": 3}), "c.yaml")
    named = PrunerSpec(type="patient", options={"patience": 3, "wrapped_pruner": "percentile"})
    assert isinstance(alone, optuna.pruners.PatientPruner)
    with pytest.raises(ConfigError, match=r"PercentilePruner needs the option\(s\) percentile"):
        make_pruner(named, "c.yaml")


@pytest.mark.parametrize(
    ("wrapped", "said"),
    [
        (
            {"type": "medain"},
            "c.yaml: study.pruner.options.wrapped_pruner.type: 'medain' is not a pruner; "
            "did you mean 'median'?",
        ),
        (
            {"options": {"n_warmup_steps": 2}, "typ": "median"},
            "c.yaml: study.pruner.options.wrapped_pruner.typ: not a pruner section: Extra "
            "inputs are not permitted",
        ),
        (
            "dominated",
            "c.yaml: study.pruner.options.wrapped_pruner: dominated is hpsearch's own rule",
        ),
        (
            {"type": "median", "options": {"n_warmup": 2}},
            "c.yaml: study.pruner.options.wrapped_pruner.options.n_warmup: MedianPruner takes "
            "no option 'n_warmup'; did you mean 'n_warmup_steps'?",
        ),
    ],
)
def test_a_patient_pruners_wrapped_pruner_is_checked_as_a_pruner_section(
    wrapped: object, said: str
) -> None:
    spec = PrunerSpec(type="patient", options={"patience": 2, "wrapped_pruner": wrapped})
    with pytest.raises(ConfigError) as caught:
        check_pruner(spec, "c.yaml")
    assert str(caught.value).startswith(said), str(caught.value)


def test_a_pruner_option_of_the_wrong_type_is_one_line_at_its_key() -> None:
    spec = PrunerSpec(type="median", options={"n_warmup_steps": "5"})
    with pytest.raises(ConfigError) as info:
        make_pruner(spec, "c.yaml")
    assert info.value.key == "study.pruner.options.n_warmup_steps"
    assert str(info.value).endswith(
        "MedianPruner takes int for 'n_warmup_steps', not '5'; give int"
    )
    # A whole number written as a float (NNI's R: 60.0, converted) is the int it is.
    whole = make_pruner(PrunerSpec(type="hyperband", options={"max_resource": 60.0}), "c.yaml")
    assert type(whole._max_resource) is int  # type: ignore[attr-defined]
