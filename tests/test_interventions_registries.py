"""Registries that carry behaviour: a ``--edit`` recipe is one :class:`Recipe` row and a continuous outcome one
:class:`Outcome` row, and everything that needs a fact about either reads the row; an A/B run's passes are listed once
from its plan. No model is loaded here."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from access.edits import Scale
from access.outcomes import ArmOutcomes
from access.units import Neuron, NeuronSet
from interventions.config import ABConfig
from interventions.edit_spec import EditSpec, edit_names
from interventions.evidence import NO_EFFECT, UNPLACED, outcome_verdict
from interventions.outcome_kinds import OUTCOMES, Outcome, outcome_label
from interventions.outcome_runs import outcome_results
from interventions.passes import Pass, arm_passes, plan_passes, store_key
from interventions.plan import pass_count
from interventions.recipes import (
    MATCHED_UNITS,
    RECIPES,
    Arm,
    Recipe,
    RecipePasses,
    RecipeSettings,
    RunData,
    placebo_family,
    plan_arms,
)
from study.layout import CAUSAL_COMMAND_EXTRA
from study.verdicts import directional, is_patch

UNITS = NeuronSet([Neuron(1, 0), Neuron(1, 3)], hook="mlp_out")


def _flip_arms(data: RunData) -> list[Arm]:
    return [Arm("flip", "units ×-1", "arm", data.config.model, (Scale(data.units, -1.0),))]


FLIP = Recipe("flip", _flip_arms, RecipePasses(1, 1), "the units negated")


def test_edit_help_lists_every_recipe_row() -> None:
    from dataclasses import fields

    help_text = next(f for f in fields(EditSpec) if f.name == "edits").metadata["help"]
    assert all(f"{name} ({recipe.help})" in help_text for name, recipe in RECIPES.items())
    with pytest.raises(Exception, match=f"expected one of {', '.join(RECIPES)}, got 'clamp'"):
        edit_names("scale,clamp")


def test_a_new_recipe_is_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(RECIPES, FLIP.name, FLIP)
    assert edit_names("scale,flip") == ["scale", "flip"]
    config = ABConfig(units="1:0,1:3", model_dir="m", data_file="d", edits="flip", placebo=5)
    assert pass_count(config) == (1, 1, 5)  # its passes are read from the row
    settings = RecipeSettings(("flip",), (0.0,), (), "dpo", "multi_turn", None)
    (arm,) = plan_arms(RunData(settings, UNITS, lambda _: None))  # type: ignore[arg-type,return-value]
    assert (arm.recipe, arm.role, placebo_family(arm)) == ("flip", "main", MATCHED_UNITS)


def test_the_study_reads_the_recipe_rows() -> None:
    assert CAUSAL_COMMAND_EXTRA == " --factor 0 --edit scale,mean,patch,steer"
    assert [directional(name) for name in ("mean", "patch sft<-dpo", "steer", "scale 0.0", "lda 2.0")] == [
        True,
        True,
        True,
        False,
        False,
    ]
    assert is_patch("patch dpo<-sft") and not is_patch("count: patch dpo<-sft") and not is_patch("mean")


def _arm(kl: list[float], kl_unedited: list[float]) -> ArmOutcomes:
    empty = np.zeros(0)
    return ArmOutcomes("greedy", np.array(kl), np.array(kl_unedited), empty, empty, empty, empty)


def test_every_outcome_row_reads_arrays_an_arm_has() -> None:
    arm = _arm([0.5, 1.0], [1.0, 2.0])
    for outcome in OUTCOMES.values():
        assert isinstance(getattr(arm, outcome.before), np.ndarray) and isinstance(
            getattr(arm, outcome.after), np.ndarray
        )
    measured = [name for name, outcome in OUTCOMES.items() if getattr(arm, outcome.before).size]  # the KL rows here
    assert [o.outcome for o in outcome_results(arm, [], n_bootstrap=100)] == measured and "gap_closed" in measured


def test_a_new_outcome_is_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    toy = Outcome("kl_share", "KL, share of the unedited", 0.5, "kl_unedited", "kl", ratio=True)
    monkeypatch.setitem(OUTCOMES, toy.name, toy)
    results = {o.outcome: o for o in outcome_results(_arm([0.5, 1.0], [1.0, 2.0]), [], n_bootstrap=50)}
    assert results["kl_share"].delta == results["gap_closed"].delta == 0.5
    assert outcome_label("kl_share") == toy.label
    # the same Δ, judged against each row's own floor
    assert outcome_verdict("kl_share", 0.4, (0.3, 0.5), None, 0) == NO_EFFECT
    assert outcome_verdict("gap_closed", 0.4, (0.3, 0.5), None, 0) == UNPLACED


def test_passes_are_listed_once_baselines_first() -> None:
    same = (Scale(UNITS, 0.0),)
    arms = [
        Arm("scale 0.0", "x", "main", "dpo", same, rule="first", placebo_edits=[(Scale(UNITS, 0.5),)]),
        Arm("scale 0.0", "x", "main", "dpo", same, rule="second"),  # the same edits: the same pass
    ]
    plan = SimpleNamespace(models={"dpo": None, "sft": None}, arms=arms)
    passes = plan_passes(plan)  # type: ignore[arg-type]
    assert [(p.role, p.name) for p in passes] == [
        ("baseline", "baseline dpo"),
        ("baseline", "baseline sft"),
        ("arm", "scale 0.0"),
        ("placebo", "scale 0.0 placebo 0"),
    ]
    assert passes[2] == arm_passes(arms[1])[0] == Pass(store_key("scale 0.0", same), "dpo", same, "arm")
    assert passes[2].key != store_key("scale 0.0", (Scale(UNITS, 0.5),))
