"""``compare_selections``: which selection rule finds units that matter, judged by the causal effect of editing them.

``probe intervene RUN --select count,mean_diff,attribution,weight`` takes the top K units of each
rule (:mod:`interventions.select_rules`) and runs the same edit on each set: by default ablation
(factor 0), or every arm of ``--edit`` (scale at ``--factor``, mean, patch, steer). Each rule's arms
get their own placebo sets, matched layer by layer to that rule's units. Everything runs as one
A/B evaluation (:func:`interventions.ab.run_ab`): one baseline per model, decoded once, and one set
of passes through the shared engine; a pass that two rules both make (the same edits) is decoded
once. The report is the usual ``ab_report.json`` / ``.md`` with arms named ``<rule>: <arm>``, plus
``selection``: each rule's units and where they came from, their overlap with every other rule's
(Jaccard, beside two random sets with the same per-layer counts), and a verdict per arm and
capability.

The verdict rule is fixed here, before any result is read, and is the rule the study report applies
to an intervention (:mod:`study.verdicts`): a rule *finds units that matter* on a
capability when its edit's Δ there is significant (95% CI excludes 0 and exact McNemar p < 0.05)
and lies beyond its own placebos (at or above their 95th percentile for a rise, at or below the 5th
for a drop, among at least 19 placebo sets), on generations the guard accepts. *Not shown*: Δ is not
significant, or it is and random units of the same layers do as much. *Cannot be decided*: a
significant Δ with fewer than 19 placebo sets, broken generations, or no judged row.

Example:
    >>> config = ABConfig(run_dir="runs/x", select="count,mean_diff", factor=0.0, placebo=20)
    >>> report = compare_selections(config)                                                  # doctest: +SKIP
    >>> [r.rule + ": " + r.verdict.status for r in report.selection.rules]                  # doctest: +SKIP
    ['count: not shown', 'mean_diff: matters']
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, replace

import numpy as np

from analysis.base_compare import jaccard, matched_random_jaccard
from analysis.config import AnalysisConfig
from interventions.ab import run_ab
from interventions.cells import Placement, effect_sentence, fmt_percentile
from interventions.config import ABConfig
from interventions.evidence import ALPHA, MIN_PLACEBO_SETS, PLACEBO_PERCENTILE, ArmEvidence, Difference
from interventions.plan import plan_ab
from interventions.results import (
    ABReport,
    ArmResult,
    CapabilityResult,
    Overlap,
    RuleSelection,
    RuleVerdict,
    Selection,
)
from interventions.rule_table import RULE_METRICS
from interventions.select_rules import RuleSet, rule_sets
from interventions.selection import describe
from judging import Judge
from probes.distributed import World

MATTERS = "matters"
NOT_SHOWN = "not shown"
CANNOT_DECIDE = "cannot be decided"
VERDICT_RULE = (
    f"a rule finds units that matter on a capability when its edit's Δ there is significant (95% CI excludes 0 and "
    f"exact McNemar p < {ALPHA}) and beyond its own placebos (at or above their "
    f"{fmt_percentile(PLACEBO_PERCENTILE)} percentile for a rise, at or below the "
    f"{fmt_percentile(100 - PLACEBO_PERCENTILE)} for a drop, among at least {MIN_PLACEBO_SETS} "
    "placebo sets matched per layer to the rule's units), on generations the guard accepts; the rule the study report "
    "applies to interventions (study/verdicts.py)"
)
N_DRAWS = 2000  # matched random pairs of sets for each overlap


def compare_selections(
    config: ABConfig,
    progress: Callable[[str], None] | None = None,
    judge: Judge | None = None,
    *,
    world: World | None = None,
) -> ABReport:
    """Run ``config``'s edits on the top ``config.edit.top_k`` units (default 64) of each rule in ``config.select``.

    One A/B evaluation (module doc); the returned report's ``selection`` holds each rule's units,
    overlaps and verdicts, and ``ab_report.md`` opens with the comparison table. ``world``: the processes of a
    data-parallel launch (:mod:`interventions.parallel`), each of which plans the run.
    """
    if not config.select or config.run_dir is None:
        raise ValueError("compare_selections needs config.select and config.run_dir (ABConfig checks both)")
    k = config.edit.top_k or AnalysisConfig.top_k
    sets = rule_sets(config.run_dir, config.capability, config.edit.hook, list(config.select), k, progress)

    def annotate(report: ABReport) -> None:
        report.selection = selection_record(sets, report, k, config.seed)

    one_edit = replace(config, positive_control=False)  # one edit per rule: the main factor is the scale arm
    world = world or World()
    plan = world.agree(lambda: plan_ab(one_edit, selections={rule: s.units for rule, s in sets.items()}))
    return run_ab(plan, progress, judge, annotate=annotate, world=world)


def selection_record(sets: dict[str, RuleSet], report: ABReport, k: int, seed: int) -> Selection:
    """The report's ``selection``: per rule its units, source, overlaps, arms and verdicts."""
    rules = []
    for rule, chosen in sets.items():
        arms = [arm for arm in report.arms if arm.name.startswith(f"{rule}: ")]
        verdicts = {arm.name: {c.capability: arm_verdict(arm, c) for c in arm.capabilities} for arm in arms}
        headline = verdicts[arms[0].name][report.capability] if arms else RuleVerdict(CANNOT_DECIDE, "no arm")
        rules.append(
            RuleSelection(
                rule=rule,
                metric=RULE_METRICS[rule],
                source=chosen.source,
                window=chosen.window,
                units=describe(chosen.units),
                arms=[arm.name for arm in arms],
                verdict=headline,
                verdicts=verdicts,
                overlap={other: overlap(chosen, sets[other], seed) for other in sets if other != rule},
            )
        )
    return Selection(k, VERDICT_RULE, rules)


def overlap(first: RuleSet, second: RuleSet, seed: int) -> Overlap:
    """Units the two rules share, their Jaccard index, and that of two random sets with the same per-layer counts
    (drawn in the rules' name order, so that both rules of a pair report the same figures)."""
    first, second = sorted((first, second), key=lambda s: s.rule)
    a = np.asarray([[n.layer, n.unit] for n in first.units.neurons], dtype=np.int64)
    b = np.asarray([[n.layer, n.unit] for n in second.units.neurons], dtype=np.int64)
    layers = sorted(set(a[:, 0].tolist()) | set(b[:, 0].tolist()))
    counts_a = np.asarray([int(np.sum(a[:, 0] == layer)) for layer in layers])
    counts_b = np.asarray([int(np.sum(b[:, 0] == layer)) for layer in layers])
    draws = matched_random_jaccard(counts_a, counts_b, first.width, N_DRAWS, seed)
    shared = len({tuple(x) for x in a.tolist()} & {tuple(x) for x in b.tolist()})
    return Overlap(shared, jaccard(a, b), float(draws.mean()), float(np.quantile(draws, 0.95)))


def arm_verdict(arm: ArmResult, c: CapabilityResult) -> RuleVerdict:
    """The verdict rule of the module doc, for one arm on one capability."""
    deltas = [d for d in (c.placebo.deltas if c.placebo else []) if math.isfinite(d)]
    undrawn = (c.placebo.undrawn or 0) if c.placebo else 0  # sets not generated: interventions.sequential
    evidence = ArmEvidence(
        arm.name,
        arm.model,
        Difference(**asdict(c.effect)),
        arm.factor,
        arm.guard.dtype,
        placebo_sets=len(deltas) + undrawn,
        percentile=c.placebo.percentile if c.placebo else None,
        rounds_to_one=arm.guard.factor_rounds_to_one,
        rows_changed=c.rows_changed,
        faults=tuple(arm.guard.faults),
    )
    d = evidence.effect
    effect = effect_sentence(d, Placement.of(c.placebo, len(deltas)), (c.rows_changed, c.n_rows))
    if evidence.faults:
        return RuleVerdict(CANNOT_DECIDE, f"the edited generations are broken: {evidence.faults[0]}")
    if d.n == 0:
        return RuleVerdict(CANNOT_DECIDE, "the judge decided no row of this capability")
    if evidence.specific():
        return RuleVerdict(MATTERS, f"significant and beyond its placebos: {effect}")
    if not evidence.effect.significant():
        return RuleVerdict(NOT_SHOWN, f"not significant: {effect}")
    if evidence.placebo_sets < MIN_PLACEBO_SETS:
        return RuleVerdict(
            CANNOT_DECIDE,
            f"significant, but {evidence.placebo_sets} placebo sets cannot place it (the rule needs "
            f"{MIN_PLACEBO_SETS}; --placebo 20): {effect}",
        )
    return RuleVerdict(NOT_SHOWN, f"significant, but random units of the same layers do as much: {effect}")
