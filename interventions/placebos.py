"""An arm's placebo sets in the report: the record of what was drawn (or why nothing was), and where the arm's Δ on
each capability falls among its placebo sets' Δs.

An arm's placebo sets are its edits' placebo family (:func:`interventions.recipes.placebo_family`), drawn when the run
is planned (:func:`interventions.plan.planned_arms`) and generated like the arm itself. Per capability the arm's Δ is
placed among theirs (:func:`interventions.stats.placebo_compare`: a percentile and an empirical p-value), beside how
many generations a set changed on average.

Example:
    >>> from interventions.results import CapabilityResult
    >>> from interventions.stats import PairedDelta
    >>> def result(delta: float, changed: int) -> CapabilityResult:
    ...     effect = PairedDelta(10, 0.5, 0.5 + delta, delta, delta, delta, 1.0)
    ...     return CapabilityResult("multi_turn", True, 10, 0, effect, changed, 0.0, 0.0, 0.0, 0.0)
    >>> arm = [result(-0.3, 6)]
    >>> rank_among_placebos(arm, [[result(d, 2)] for d in (-0.1, 0.0, 0.1)])
    >>> arm[0].placebo.percentile, arm[0].placebo.rows_changed_mean
    (0.0, 2.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from interventions.recipes import placebo_family
from interventions.results import CapabilityResult, OutcomeResult, PlaceboDrawn, PlaceboRank, PlaceboSkipped
from interventions.stats import placebo_compare

if TYPE_CHECKING:
    from access.edits import Edit
    from interventions.recipes import Arm


def rank_among_placebos(
    capabilities: Sequence[CapabilityResult], sets: Sequence[Sequence[CapabilityResult]], undrawn: int = 0
) -> None:
    """Place each capability's Δ among the same capability's Δs in every placebo set (``sets``, one list of results
    per set), setting its ``placebo``; ``undrawn``: the arm's sets not generated once its verdict was fixed
    (:mod:`interventions.sequential`)."""
    for capability in capabilities:
        theirs = [c for results in sets for c in results if c.capability == capability.capability]
        cmp = placebo_compare(capability.effect.delta, [c.effect.delta for c in theirs])
        changed = float(np.mean([c.rows_changed for c in theirs]))
        capability.placebo = PlaceboRank(cmp.percentile, cmp.p_empirical, cmp.placebo, changed, undrawn or None)


def skip_placebos(capabilities: Sequence[CapabilityResult], n_sets: int, why: str) -> None:
    """An arm that generates none of its ``n_sets`` placebo sets (decide first, :mod:`interventions.sequential`):
    each capability's rank has no percentile and counts every set as undrawn, saying ``why``."""
    nan = float("nan")
    for capability in capabilities:
        capability.placebo = PlaceboRank(nan, nan, [], None, n_sets, why)


def generated_line(capabilities: Sequence[CapabilityResult]) -> str:
    """How many placebo sets an arm generated for its compliance percentile, and why no more (one clause; "" where it
    generated all, or has none)."""
    rank = next((c.placebo for c in capabilities if c.target and c.placebo is not None), None)
    return _drawn_line(rank, "generated", "for compliance")


def forced_line(outcomes: Sequence[OutcomeResult]) -> str:
    """How many placebo sets an arm teacher-forced for its continuous outcomes, and why no more (one clause; "" where
    it teacher-forced all, or has none)."""
    rank = next((o.placebo for o in outcomes if o.placebo is not None), None)
    return _drawn_line(rank, "teacher-forced", "for the outcomes")


def _drawn_line(rank: PlaceboRank | None, verb: str, what: str) -> str:
    if rank is None or not rank.undrawn:
        return ""
    if rank.skipped:
        return f"{verb} 0 of {rank.undrawn} {what} ({rank.skipped})"
    drawn = len(rank.deltas)
    return f"{verb} {drawn} of {drawn + rank.undrawn} {what} (then the verdict could no longer change)"


def drawn(arm: Arm, seed: int) -> PlaceboDrawn:
    """The record of the arm's placebo sets."""
    return PlaceboDrawn(
        n_sets=len(arm.placebo_edits),
        seed=seed,
        family=placebo_family(arm),
        factor=arm.factor,
        sets=[_summary(edits[0]) if len(edits) == 1 else [_summary(e) for e in edits] for edits in arm.placebo_edits],
    )


def skipped(arm: Arm, seed: int, why: str) -> PlaceboSkipped:
    """The record of an arm whose placebo sets were not drawn, and why."""
    return PlaceboSkipped(n_sets=0, seed=seed, family=placebo_family(arm), skipped=why)


def _summary(edit: Edit) -> Any:
    body = edit.describe()
    return body.get("units") if "units" in body else {"layer": body.get("layer"), "norm": body.get("norm")}
