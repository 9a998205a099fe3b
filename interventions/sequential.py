"""Decide-first and sequential placebo generation: which arms generate placebo sets for their compliance percentile,
and when an arm may stop drawing them (``--placebo-generation decide-first``, the default; fixed 2026-11-29 before any
default-pair result was read; docs/interventions.md, "Placebo control").

The placebo percentile of compliance is read by one rule (:meth:`interventions.evidence.ArmEvidence.beyond_placebo`,
through :meth:`~interventions.evidence.ArmEvidence.specific`), at two counts of sets: the sets the arm drew
(``placebo_sets`` in :mod:`study.evidence`: the configured N, every one of which is teacher-forced for the continuous
outcomes) and the sets with a finite Δ (:func:`interventions.select_compare.arm_verdict`, which also reads whether
there are :data:`~interventions.evidence.MIN_PLACEBO_SETS` of them). Two rules skip generations without changing any
verdict those readers give:

1. **Decide first** (:func:`skip_reason`). An arm's own generations run first. An arm none of whose generations differ
   from its baseline's, and whose effect is significant on no scored capability, generates no placebo set: its
   verdict cannot depend on them, since every reader asks for a significant effect
   (:meth:`~interventions.evidence.Difference.significant`) before it reads the percentile (``specific``, claim 3's
   "too few sets", ``--select``'s "cannot place it"). Identical generations give Δ = 0 and McNemar p = 1 under a
   judge that scores the same text alike; a judge that does not, and so finds a significant Δ on identical texts,
   makes the arm generate its sets (the fallback). Its placebo rank then has no percentile, and counts its N sets
   as not generated (``undrawn``), so every reader still sees N sets.
2. **Sequential sets** (:func:`verdict_fixed`; Besag and Clifford 1991). An arm that must generate draws its sets
   :data:`WAVE` at a time, in order, and stops once, on every scored capability, the readers' reading of the final
   N sets is the same whatever the undrawn sets show. The reading is a function of counts: how many of the N Δs lie
   against the arm's Δ (above a rise, below a fall or a zero), tie it, lie with it, or are not finite. Adding a set
   against, or a tie, can only lower the percentile on the arm's side, one with it only raise it, and a non-finite
   one changes neither the percentile nor anything but the finite count; so the reading over every completion lies
   between those of the extreme completions: every undrawn set with the arm, every one against it, and every one
   not finite (possible only under a judge whose undecided rows depend on the response; the rule judge's depend on
   the row alone). :func:`verdict_fixed` evaluates the readers' own code on those extremes. Whether 19 finite Δs are
   there is read only for a significant Δ (``--select``'s "cannot place it"), so only there is it part of the
   reading. The placebo rank then holds the drawn sets' Δs and percentile and the number of sets left ``undrawn``,
   which ``--select``'s count adds.

Both rules apply from :data:`~interventions.evidence.MIN_PLACEBO_SETS` configured sets; fewer carry no verdict and
all generate, to be read.

Example:
    >>> verdict_fixed(0.3, [0.5, 0.6], 20, nan_possible=False)   # two placebo Δs above a rise: never beyond 95%
    True
    >>> verdict_fixed(0.3, [0.0] * 10, 20, nan_possible=False)   # ten below: the next ten decide
    False
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict

from interventions.evidence import MIN_PLACEBO_SETS, ArmEvidence, Difference
from interventions.results import CapabilityResult
from interventions.stats import placebo_compare

DECIDE_LINE = "decide-first: an arm's placebo sets generate after it is judged, as its verdict needs"
WAVE = 4  # placebo sets an arm generates together (in shared batches) before the stopping rule is read again


def skip_reason(capabilities: Sequence[CapabilityResult], rows_changed: int) -> str | None:
    """Decide first: why an arm generates no placebo set for its compliance percentile (module doc, rule 1), or None
    where it must generate them: some generation changed, or some capability's effect is significant."""
    if rows_changed:
        return None
    significant = [c.capability for c in capabilities if _difference(c).significant()]
    if significant:
        return None
    return "no generation changed, so Δ is 0 and no verdict reads the placebo percentile"


def _difference(c: CapabilityResult) -> Difference:
    return Difference(**asdict(c.effect))


def reading(delta: float, deltas: Sequence[float], n_sets: int, counted: bool = True) -> tuple[bool, bool, bool]:
    """What the verdict readers take from ``n_sets`` placebo sets with these Δs (module doc): beyond them at the
    drawn count, beyond them at the finite count, and whether the finite count reaches
    :data:`~interventions.evidence.MIN_PLACEBO_SETS` (``counted``; ``--select`` reads that only for a significant
    Δ, so for another it is left out: False).

    >>> reading(0.3, [0.0] * 19 + [0.5], 20), reading(0.3, [0.0] * 18 + [0.5, 0.6], 20)
    ((True, True, True), (False, False, True))
    """
    cmp = placebo_compare(delta, deltas)
    finite = sum(math.isfinite(d) for d in deltas)
    effect = Difference(0, math.nan, math.nan, delta, math.nan, math.nan, math.nan)

    def beyond(sets: int) -> bool:
        return ArmEvidence("", "", effect, placebo_sets=sets, percentile=cmp.percentile).beyond_placebo()

    return beyond(n_sets), beyond(finite), counted and finite >= MIN_PLACEBO_SETS


def verdict_fixed(
    delta: float, drawn: Sequence[float], n_sets: int, *, nan_possible: bool, counted: bool = True
) -> bool:
    """Whether the readers' :func:`reading` of all ``n_sets`` sets is already fixed by the ``drawn`` Δs, whatever the
    undrawn ones show (module doc, rule 2)."""
    left = n_sets - len(drawn)
    if left <= 0:
        return True
    centre = delta if math.isfinite(delta) else 0.0
    completions = [[centre + 1.0] * left, [centre - 1.0] * left] + ([[math.nan] * left] if nan_possible else [])
    readings = {reading(delta, [*drawn, *rest], n_sets, counted) for rest in completions}
    return len(readings) == 1


def all_fixed(
    capabilities: Sequence[CapabilityResult],
    sets: Sequence[Sequence[CapabilityResult]],
    n_sets: int,
    *,
    nan_possible: bool,
) -> bool:
    """:func:`verdict_fixed` on every scored capability of the arm, given its placebo sets drawn so far."""
    for capability in capabilities:
        drawn = [c.effect.delta for results in sets for c in results if c.capability == capability.capability]
        nan_possible_here = nan_possible or not all(math.isfinite(d) for d in drawn)
        counted = _difference(capability).significant()
        if not verdict_fixed(capability.effect.delta, drawn, n_sets, nan_possible=nan_possible_here, counted=counted):
            return False
    return True
