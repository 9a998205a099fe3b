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


# --- the continuous outcomes (issue 36): claim 3 on gap closed and margin, claim 4 on the gap a patch closes ---------

from interventions.evidence import (  # noqa: E402
    MOVES,
    NO_EFFECT,
    UNDEFINED,
    UNPLACED,
    WITHIN_PLACEBO,
    OutcomeEvidence,
    outcome_verdict,
)
from study.verdicts import MIN_GAP_CLOSED, units_cause_by_gap  # noqa: E402

NO_ROWS = Difference(0, NAN, NAN, NAN, NAN, NAN, NAN)  # an --outcomes only arm: no compliance
CEILING = diff(0.0, 0.0, 0.0, 1.0, before=1.0)


def outcome(
    name: str, delta: float, low: float, high: float, pct: float | None = 99.0, sets: int = 20
) -> OutcomeEvidence:
    verdict = outcome_verdict(name, delta, (low, high), pct, sets)
    return OutcomeEvidence(name, delta, low, high, pct, sets, verdict)


GAP_UP, GAP_DOWN = outcome("gap_closed", 0.4, 0.3, 0.5), outcome("gap_closed", -0.4, -0.5, -0.3, pct=1.0)
MARGIN_UP, MARGIN_DOWN = outcome("margin_change", 2.0, 1.0, 3.0), outcome("margin_change", -2.0, -3.0, -1.0, pct=1.0)
GAP_FLAT = outcome("gap_closed", 0.001, -0.01, 0.01, pct=50.0)
GAP_WITHIN = outcome("gap_closed", 0.4, 0.3, 0.5, pct=60.0)


@pytest.mark.parametrize(
    "args, expected",
    [
        (("gap_closed", 0.4, (0.3, 0.5), 99.0, 20), MOVES),
        (("gap_closed", -0.4, (-0.5, -0.3), 2.0, 20), MOVES),
        (("gap_closed", -0.4, (-0.5, -0.3), 99.0, 20), WITHIN_PLACEBO),  # a fall that placebos outdo upward
        (("gap_closed", 0.4, (0.3, 0.5), 60.0, 20), WITHIN_PLACEBO),
        (("gap_closed", 0.4, (0.3, 0.5), 99.0, 10), UNPLACED),
        (("gap_closed", 0.4, (0.3, 0.5), None, 0), UNPLACED),
        (("gap_closed", 0.4, (-0.1, 0.5), 99.0, 20), NO_EFFECT),  # CI holds 0
        (("gap_closed", 0.005, (0.004, 0.006), 99.0, 20), NO_EFFECT),  # below the 1% floor
        (("margin_change", 0.05, (0.04, 0.06), 99.0, 20), NO_EFFECT),  # below 0.1 nats
        (("reference_change", 0.05, (0.04, 0.06), 99.0, 20), MOVES),
        (("gap_closed", NAN, (NAN, NAN), None, 20), UNDEFINED),
    ],
)
def test_outcome_verdict_every_branch(args: tuple, expected: str) -> None:
    assert outcome_verdict(*args) == expected


def test_the_kl_floor_scales_with_the_unedited_kl() -> None:
    assert outcome_verdict("kl", -0.005, (-0.006, -0.004), 1.0, 20, scale=1.0) == NO_EFFECT
    assert outcome_verdict("kl", -0.005, (-0.006, -0.004), 1.0, 20, scale=0.1) == MOVES


@pytest.mark.parametrize(
    "evidence, status, needle",
    [
        (arm("scale 0.999999", CEILING, factor=PAPER_FACTOR, outcomes=(GAP_UP, MARGIN_UP)), SUPPORTED, "gap closed"),
        (arm("scale 0.999999", NO_ROWS, factor=PAPER_FACTOR, outcomes=(GAP_UP, MARGIN_UP)), SUPPORTED, "lifted"),
        (arm("scale 0.999999", CEILING, factor=PAPER_FACTOR, outcomes=(GAP_UP, MARGIN_DOWN)), NOT_SUPPORTED, "no lift"),
        (arm("scale 0.999999", CEILING, factor=PAPER_FACTOR, outcomes=(GAP_DOWN, MARGIN_DOWN)), CONTRADICTED, "away"),
        (arm("scale 0.999999", CEILING, factor=PAPER_FACTOR, outcomes=(GAP_FLAT,)), NOT_SUPPORTED, "no DPO margin"),
        (
            arm("scale 0.999999", CEILING, factor=PAPER_FACTOR, outcomes=(GAP_WITHIN, MARGIN_UP)),
            NOT_SUPPORTED,
            "within placebo",
        ),
        (
            arm("scale 0.999999", UP, factor=PAPER_FACTOR, pct=99.0, outcomes=(GAP_DOWN, MARGIN_DOWN)),
            NOT_SUPPORTED,
            "disagree",
        ),
        (
            arm("scale 0.999999", DOWN, factor=PAPER_FACTOR, pct=1.0, outcomes=(GAP_UP, MARGIN_UP)),
            NOT_SUPPORTED,
            "disagree",
        ),
        (
            arm(
                "scale 0.999999",
                CEILING,
                factor=PAPER_FACTOR,
                outcomes=(
                    outcome("gap_closed", 0.4, 0.3, 0.5, sets=5),
                    outcome("margin_change", 2.0, 1.0, 3.0, sets=5),
                ),
            ),
            CANNOT_TEST,
            "only 5 placebo sets",
        ),
    ],
)
def test_claim_3_reads_gap_closed_and_margin(evidence: ArmEvidence, status: str, needle: str) -> None:
    verdict = paper_scaling(evidence, "probe intervene RUN -c multi_turn")
    assert verdict.status == status and needle in verdict.reason, verdict.reason


def test_claim_3_without_outcomes_or_rows_cannot_be_tested() -> None:
    verdict = paper_scaling(arm("scale 0.999999", NO_ROWS, factor=PAPER_FACTOR), "I")
    assert verdict.status == CANNOT_TEST and "no multi_turn row" in verdict.reason
    ceiling = paper_scaling(arm("scale 0.999999", CEILING, factor=PAPER_FACTOR), "I")
    assert ceiling.status == CANNOT_TEST and "already complies" in ceiling.reason


def _patch(gap: OutcomeEvidence, name: str = "patch dpo<-sft", **kw) -> ArmEvidence:
    return arm(name, NO_ROWS, outcomes=(gap,), **kw)


@pytest.mark.parametrize(
    "arms, status, needle",
    [
        ([_patch(GAP_UP)], SUPPORTED, "closes 40.0% [30.0, 50.0] of the SFT→DPO gap, at the 99th percentile of 20"),
        ([_patch(GAP_UP), _patch(GAP_DOWN, "patch sft<-dpo")], NOT_SUPPORTED, "no patch closes 10%"),
        ([_patch(GAP_DOWN)], CONTRADICTED, "apart"),
        ([_patch(GAP_WITHIN)], NOT_SUPPORTED, "60th percentile"),
        ([_patch(GAP_FLAT)], NOT_SUPPORTED, "no patch closes"),
        ([_patch(outcome("gap_closed", 0.08, 0.05, 0.11))], NOT_SUPPORTED, "no patch closes"),  # CI low < 10%
        ([_patch(outcome("gap_closed", NAN, NAN, NAN, pct=None))], NOT_SUPPORTED, "no SFT→DPO gap"),
        ([_patch(outcome("gap_closed", 0.4, 0.3, 0.5, sets=3))], CANNOT_TEST, "placebo sets"),
        ([_patch(GAP_UP, faults=("broken",))], CANNOT_TEST, "broken"),
    ],
)
def test_claim_4_on_the_gap_a_patch_closes(arms: list[ArmEvidence], status: str, needle: str) -> None:
    verdict = units_cause(arms, None, "INTERVENE", "EVAL")  # needs no compliance difference between the models
    assert verdict.status == status and needle in verdict.reason, verdict.reason


def test_claim_4_falls_back_to_compliance_without_a_patch_outcome() -> None:
    assert units_cause_by_gap([arm("mean", UP, outcomes=(GAP_UP,))], "I") is None
    assert units_cause([arm("mean", UP, outcomes=(GAP_UP,))], None, "I", "E").describe() == "not run (E)"
    assert MIN_GAP_CLOSED == 0.10


# --- issue 50: claim 1c by probe localize's rule, and claim 4 at every k of the localize curve ----------------------

from localize.verdicts import WindowResult  # noqa: E402
from study.verdicts import NO_PLACEBO_AT_K, CurvePointEvidence, units_cause_at_k, window_carried  # noqa: E402


@pytest.mark.parametrize(
    "results, layers, status, needle",
    [
        (
            [WindowResult("necessity", 0.9, 0.85, 0.95), WindowResult("sufficiency", 0.92, 0.81, 0.99)],
            19,
            SUPPORTED,
            "",
        ),
        (
            [WindowResult("necessity", 0.9, 0.85, 0.95), WindowResult("sufficiency", 0.5, 0.4, 0.6)],
            19,
            NOT_SUPPORTED,
            "",
        ),
        ([WindowResult("necessity", 0.85, 0.7, 0.95)], 19, CANNOT_TEST, "inconclusive: "),
        ([WindowResult("necessity", 0.95, 0.9, 1.0)], 21, CANNOT_TEST, "n/a: "),  # 21 of 30 layers: over 2/3
        ([WindowResult("necessity", NAN, NAN, NAN)], 19, CANNOT_TEST, "no gap closed"),
    ],
)
def test_claim_1c_is_localize_rule_read_as_a_study_verdict(
    results: list[WindowResult], layers: int, status: str, needle: str
) -> None:
    verdict = window_carried(results, layers, 30, "LOCALIZE")
    assert verdict.claim == "1c" and verdict.status == status and needle in verdict.reason, verdict.reason
    assert f"{layers} of 30 layers" in verdict.reason or "no gap" in verdict.reason


def test_claim_1c_without_a_localize_report_is_not_measured() -> None:
    verdict = window_carried(None, 0, 0, "probe localize RUN -c multi_turn")
    assert verdict.status == NOT_RUN and verdict.reason.startswith("not measured")
    assert verdict.describe() == "not run (probe localize RUN -c multi_turn)"


def _point(units: int, f: float, low: float, high: float, direction: str = "DPO <- SFT", sets: int = 20, spread=0.0):
    placebo = tuple(spread * (i - sets / 2) / sets for i in range(sets))
    return CurvePointEvidence(f"{units}u", units, direction, f, low, high, placebo)


def test_claim_4_at_every_k_uses_the_gap_rule_and_says_where_no_placebo_ran() -> None:
    points = [
        _point(4, 0.004, 0.001, 0.008),  # below the gap-closed floor: no effect
        _point(40, 0.5, 0.3, 0.7),  # beyond every random set, CI low 30%: supported
        _point(40, 0.45, 0.2, 0.6, "SFT <- DPO"),
        _point(80, 0.08, 0.05, 0.11),  # beyond placebo but its CI's low end under 10%
        _point(120, -0.4, -0.5, -0.3),  # widens the gap beyond placebo
        _point(400, 0.9, 0.8, 1.0, sets=0),  # no random set of this size
        _point(400, 0.9, 0.8, 1.0, "SFT <- DPO", sets=0),
        _point(200, 0.9, 0.8, 1.0, sets=5),  # too few to place it
        _point(800, 0.1, 0.0, 0.2, spread=1.0),  # within its placebos
    ]
    verdicts = {v.units: v for v in units_cause_at_k(points)}
    assert list(verdicts) == [4, 40, 80, 120, 200, 400, 800]
    assert verdicts[4].status == NOT_SUPPORTED
    assert verdicts[40].status == SUPPORTED and "DPO <- SFT closes 50.0% [30.0, 70.0]" in verdicts[40].reason
    assert "SFT <- DPO closes 45.0%" in verdicts[40].reason and "of 20 matched placebo sets" in verdicts[40].reason
    assert verdicts[80].status == NOT_SUPPORTED
    assert verdicts[120].status == CONTRADICTED
    assert (
        verdicts[400].status == NO_PLACEBO_AT_K == "no placebo at this k" and "no placebo sets" in verdicts[400].reason
    )
    assert verdicts[200].status == CANNOT_TEST and "fewer than 19 placebo sets at this k" in verdicts[200].reason
    assert verdicts[800].status == NOT_SUPPORTED
    no_gap = units_cause_at_k([_point(4, NAN, NAN, NAN)])
    assert no_gap[0].status == NOT_SUPPORTED and "no SFT→DPO gap" in no_gap[0].reason
