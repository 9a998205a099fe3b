"""The study's evidence as the verdict rules read it, and the four verdicts.

The files hold A/B reports, an evaluation table and a localize report; the rules of
:mod:`study.verdicts` read small records. Here: DPO − SFT on a capability from the
evaluation (:func:`eval_difference`), an arm of a report on its target capability
(:func:`arm_evidence`), which arm answers claim 3 (the scale arm at the paper's factor on DPO that
measured compliance: with most placebo sets, then the main arm, then the newest report) and which
arms answer claim 4 (per name, the same preference; an arm of ``--outcomes only`` answers it with its
continuous outcomes), claim 1c's window arm (:func:`window_results`) and the paper's ranking's localize curve that
claim 4 is read on at every k (:func:`paper_curve`); :func:`study.claims.decide` reads them into ``study.verdicts``.

Example:
    >>> from training.eval_rows import EvalRow
    >>> row = EvalRow("multi_turn", 10, 1.0, 0.9, -0.1, (-0.3, 0.0), 1.0)
    >>> eval_difference(EvalRecord([row])).delta
    -0.1
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import TYPE_CHECKING

from interventions.evidence import ArmEvidence, Difference, OutcomeEvidence
from interventions.results import ABReport, ArmResult
from localize.rankings import COUNT
from study.layout import TARGET
from study.stored import EvalRecord
from study.verdicts import ABLATION, FACTOR_TOLERANCE, PAPER_FACTOR, directional

PAPER_RANKING = COUNT  # the paper's ranking of units, by localize's name: claim 4 is read on its curve at every k

if TYPE_CHECKING:
    from localize.records import LocalizeReport
    from localize.verdicts import WindowResult
    from study.records import LoadedReport, Study
    from study.verdicts import CurvePointEvidence


def eval_difference(evaluation: EvalRecord | None, capability: str = TARGET) -> Difference | None:
    """DPO − SFT on ``capability`` from an evaluation's table (``before`` = SFT); n = 0 when it has no such row;
    None without one."""
    if evaluation is None:
        return None
    row = evaluation.row(capability)
    if row is None:
        return Difference(0, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan)
    return Difference(row.n, row.sft_rate, row.dpo_rate, row.delta, *row.delta_ci, row.mcnemar_p)


def arm_evidence(report: ABReport, arm: ArmResult) -> ArmEvidence:
    """An arm of a report on its target capability, as the verdict rules read it (an arm of ``--outcomes only``:
    its compliance effect has n = 0)."""
    c = next((c for c in arm.capabilities if c.capability == report.capability), None)
    nan = math.nan
    outcomes = tuple(
        OutcomeEvidence(
            o.outcome,
            o.delta,
            o.ci_low,
            o.ci_high,
            o.placebo.percentile if o.placebo else None,
            len(o.placebo.deltas) + (o.placebo.undrawn or 0) if o.placebo else 0,
            o.verdict,
            len(o.placebo.deltas) if o.placebo and o.placebo.undrawn else None,
        )
        for o in arm.outcomes
    )
    return ArmEvidence(
        name=arm.name,
        model=arm.model,
        factor=arm.factor,
        dtype=report.dtype,
        effect=Difference(**asdict(c.effect)) if c else Difference(0, nan, nan, nan, nan, nan, nan),
        placebo_sets=arm.placebo.n_sets if c and c.placebo else 0,
        percentile=c.placebo.percentile if c and c.placebo else None,
        rounds_to_one=arm.factor is not None and arm.guard.factor_rounds_to_one,
        rows_changed=c.rows_changed if c else 0,
        faults=tuple(arm.guard.faults),
        outcomes=outcomes,
        generated=len(c.placebo.deltas) if c and c.placebo and c.placebo.undrawn else None,
    )


def _preference(loaded: LoadedReport, arm: ArmResult) -> tuple[int, int, float]:
    """Prefer an arm with placebos (more is better), then the main arm, then the newest report."""
    return arm.placebo.n_sets, int(arm.role == "main"), loaded.path.stat().st_mtime


def measured_compliance(report: ABReport, arm: ArmResult) -> bool:
    """Whether ``arm`` has a compliance result on its report's capability (an arm of ``--outcomes only`` has
    none: it generated nothing, and carries the continuous outcomes alone)."""
    return any(c.capability == report.capability for c in arm.capabilities)


def paper_arm(study: Study) -> tuple[LoadedReport, ArmResult] | None:
    """Claim 3's arm: a claim about compliance, so an arm that measured it."""
    found = [
        (r, a)
        for r in study.target_reports()
        for a in r.report.arms
        if a.factor is not None
        and abs(a.factor - PAPER_FACTOR) <= FACTOR_TOLERANCE
        and a.model == "dpo"
        and measured_compliance(r.report, a)
    ]
    return max(found, key=lambda pair: _preference(*pair)) if found else None


def causal_arms(study: Study) -> list[tuple[LoadedReport, ArmResult]]:
    best: dict[str, tuple[LoadedReport, ArmResult]] = {}
    for loaded in study.target_reports():
        for arm in loaded.report.arms:
            if (directional(arm.name) or arm.name == ABLATION) and (
                arm.name not in best or _preference(loaded, arm) > _preference(*best[arm.name])
            ):
                best[arm.name] = (loaded, arm)
    return list(best.values())


def window_results(report: LocalizeReport) -> list[WindowResult]:
    """Claim 1c's evidence: the window arm of the localize profile (both sub-layers of its layers) per direction."""
    from localize.profile import WINDOW
    from localize.verdicts import WindowResult

    return [WindowResult(r.direction, r.f, r.ci_low, r.ci_high) for r in report.profile if r.name == WINDOW]


def paper_curve(report: LocalizeReport) -> list[CurvePointEvidence]:
    """Claim 4 at every k: the paper's ranking's curve in each direction (k > 0), each point with the f of the random
    sets of its size where the report has them ([] without the ranking)."""
    from study.verdicts import CurvePointEvidence

    out = []
    for direction in report.directions:
        band = {p.units: tuple(p.values) for p in report.placebo if p.direction == direction.name}
        out += [
            CurvePointEvidence(p.k, p.units, direction.label, p.f, p.ci_low, p.ci_high, band.get(p.units, ()))
            for p in report.curve(PAPER_RANKING, direction.name)
            if p.units > 0
        ]
    return out
