"""The verdict rules of the replication report, on hand-made records: every verdict of every claim, and the edges."""

from __future__ import annotations

import math

import pytest

from study.verdicts import (
    CANNOT_TEST,
    CONTRADICTED,
    MIN_PLACEBO_SETS,
    NOT_RUN,
    NOT_SUPPORTED,
    PAPER_FACTOR,
    STATUSES,
    SUPPORTED,
    ArmEvidence,
    DepthShare,
    Difference,
    Verdict,
    alignment_tax,
    late_layers,
    paper_scaling,
    units_cause,
)

NAN = math.nan


def diff(delta: float, low: float, high: float, p: float, before: float = 0.5, n: int = 100) -> Difference:
    return Difference(n, before, before + delta, delta, low, high, p)


UP = diff(+0.10, +0.03, +0.17, 0.004)
DOWN = diff(-0.10, -0.17, -0.03, 0.004)
FLAT = diff(0.0, -0.05, +0.05, 1.0)
UP_NOT_SIGNIFICANT_BY_P = diff(+0.10, +0.01, +0.19, 0.07)  # CI excludes 0, McNemar does not agree: no


def arm(
    name: str, effect: Difference, model: str = "dpo", sets: int = 20, pct: float | None = 50.0, **kw
) -> ArmEvidence:
    return ArmEvidence(name=name, model=model, effect=effect, placebo_sets=sets, percentile=pct, **kw)


def test_the_paper_factor_is_the_one_the_interventions_use() -> None:
    from access.factors import PAPER_FACTOR as used

    assert used == PAPER_FACTOR


@pytest.mark.parametrize(
    "shares, status",
    [
        ([DepthShare("multi_turn", 0.80, 0.75, 0.85, 0.63), DepthShare("nested", 0.70, 0.66, 0.74, 0.63)], SUPPORTED),
        (
            [DepthShare("multi_turn", 0.80, 0.75, 0.85, 0.63), DepthShare("nested", 0.64, 0.60, 0.68, 0.63)],
            NOT_SUPPORTED,
        ),
        (
            [DepthShare("multi_turn", 0.40, 0.35, 0.45, 0.63), DepthShare("nested", 0.50, 0.45, 0.55, 0.63)],
            CONTRADICTED,
        ),
        (
            [DepthShare("multi_turn", 0.40, 0.35, 0.45, 0.63), DepthShare("nested", 0.64, 0.60, 0.68, 0.63)],
            NOT_SUPPORTED,
        ),
        ([DepthShare("multi_turn", 0.63, 0.63, 0.70, 0.63)], NOT_SUPPORTED),  # the CI must lie strictly above
    ],
)
def test_claim_1_late_layers(shares: list[DepthShare], status: str) -> None:
    verdict = late_layers(shares, "probe analyze RUN")
    assert verdict.status == status and verdict.claim == 1
    assert all(s.capability in verdict.reason for s in shares)


def test_claim_1_not_run_and_untestable() -> None:
    assert late_layers(None, "probe analyze RUN").describe() == "not run (probe analyze RUN)"
    untestable = late_layers(None, "probe analyze RUN", untestable="the recording holds layers 12-31 only")
    assert (
        untestable.status == CANNOT_TEST
        and untestable.describe() == "cannot be tested here (the recording holds layers 12-31 only)"
    )


@pytest.mark.parametrize(
    "difference, status",
    [
        (DOWN, SUPPORTED),
        (UP, CONTRADICTED),
        (FLAT, NOT_SUPPORTED),
        (UP_NOT_SIGNIFICANT_BY_P, NOT_SUPPORTED),
        (diff(-0.10, -0.17, -0.03, 0.08), NOT_SUPPORTED),  # p above 0.05
        (diff(-0.10, -0.17, +0.01, 0.01), NOT_SUPPORTED),  # CI reaches 0
        (Difference(0, NAN, NAN, NAN, NAN, NAN, NAN), CANNOT_TEST),  # no judged multi_turn row
        (diff(0.0, 0.0, 0.0, 1.0, before=0.0), CANNOT_TEST),  # SFT at 0%: no room for a tax
    ],
)
def test_claim_2_alignment_tax(difference: Difference, status: str) -> None:
    assert alignment_tax(difference, "probe models eval").status == status


def test_claim_2_not_run_names_the_command() -> None:
    verdict = alignment_tax(None, "probe models eval --out RUN/eval.json")
    assert verdict.status == NOT_RUN and verdict.command == "probe models eval --out RUN/eval.json"


@pytest.mark.parametrize(
    "evidence, status, needle",
    [
        (arm("scale 0.999999", UP, pct=100.0), SUPPORTED, "beyond its placebos"),
        (arm("scale 0.999999", UP, pct=80.0), NOT_SUPPORTED, "80th percentile of 20 placebo sets"),
        (arm("scale 0.999999", UP, sets=5, pct=100.0), CANNOT_TEST, "only 5 placebo sets"),
        (arm("scale 0.999999", DOWN, pct=0.0), CONTRADICTED, "lowered"),
        (arm("scale 0.999999", FLAT), NOT_SUPPORTED, "no lift"),
        (arm("scale 0.999999", diff(0.0, 0.0, 0.0, 1.0, before=1.0)), CANNOT_TEST, "already complies on every row"),
        (
            arm("scale 0.999999", FLAT, dtype="bfloat16", rounds_to_one=True),
            CANNOT_TEST,
            "rounds to exactly 1 in bfloat16",
        ),
        (arm("scale 0.999999", UP, pct=100.0, faults=("logits were inf/NaN",)), CANNOT_TEST, "broken"),
        (arm("scale 0.999999", Difference(0, NAN, NAN, NAN, NAN, NAN, NAN)), CANNOT_TEST, "no multi_turn row"),
    ],
)
def test_claim_3_paper_scaling(evidence: ArmEvidence, status: str, needle: str) -> None:
    verdict = paper_scaling(evidence, "probe intervene RUN -c multi_turn")
    assert verdict.status == status and needle in verdict.reason, verdict.reason


def test_claim_3_not_run() -> None:
    assert (
        paper_scaling(None, "probe intervene RUN -c multi_turn").describe()
        == "not run (probe intervene RUN -c multi_turn)"
    )


TAX = DOWN  # DPO below SFT on multi_turn: arms moving DPO toward SFT should raise it


@pytest.mark.parametrize(
    "arms, status, needle",
    [
        ([arm("patch dpo<-sft", UP, pct=100.0)], SUPPORTED, "patch dpo<-sft moved compliance toward"),
        (
            [arm("patch sft<-dpo", DOWN, model="sft", pct=0.0)],
            SUPPORTED,
            "patch sft<-dpo",
        ),  # SFT given DPO's values loses compliance
        ([arm("mean", DOWN, pct=0.0)], CONTRADICTED, "away from the other model"),
        ([arm("steer", UP, pct=100.0), arm("mean", DOWN, pct=0.0)], NOT_SUPPORTED, "no arm moved"),  # mixed
        ([arm("steer", UP, pct=70.0)], NOT_SUPPORTED, "no arm moved"),  # random directions do as much
        ([arm("scale 0.0", DOWN, pct=0.0)], NOT_SUPPORTED, "ablation shows the units matter"),
        ([arm("mean", UP, sets=5, pct=100.0)], CANNOT_TEST, f"with {MIN_PLACEBO_SETS} or more placebo sets"),
        ([arm("scale 0.0", DOWN, sets=0, pct=None)], CANNOT_TEST, "placebo sets"),  # the positive control has none
    ],
)
def test_claim_4_units_cause(arms: list[ArmEvidence], status: str, needle: str) -> None:
    verdict = units_cause(arms, TAX, "probe intervene RUN --edit mean,patch,steer", "probe models eval")
    assert verdict.status == status and needle in verdict.reason, verdict.reason


def test_claim_4_needs_a_behaviour_change_and_the_arms() -> None:
    arms = [arm("patch dpo<-sft", UP, pct=100.0)]
    assert units_cause(None, TAX, "INTERVENE", "EVAL").describe() == "not run (INTERVENE)"
    assert units_cause(arms, None, "INTERVENE", "EVAL").describe() == "not run (EVAL)"
    flat = units_cause(arms, FLAT, "INTERVENE", "EVAL")
    assert flat.status == CANNOT_TEST and "no behaviour change" in flat.reason
    assert units_cause(arms, Difference(0, NAN, NAN, NAN, NAN, NAN, NAN), "I", "E").status == CANNOT_TEST
    gain = units_cause([arm("patch dpo<-sft", DOWN, pct=0.0)], UP, "I", "E")  # DPO above SFT: toward SFT means down
    assert gain.status == SUPPORTED


def test_a_verdict_is_one_of_five() -> None:
    assert STATUSES == ("supported", "not supported", "contradicted", "cannot be tested here", "not run")
    with pytest.raises(ValueError):
        Verdict(1, "likely", "no")
