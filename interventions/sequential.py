"""Decide-first and sequential placebo sets: which arms generate placebo sets for their compliance percentile and
teacher-force them for their continuous outcomes, and when an arm may stop drawing them (``--placebo-generation
decide-first``, the default; rules 1 and 2 fixed 2026-11-29 before any default-pair result was read, rule 3 the same
day before any default-pair run under it; docs/interventions.md, "Which placebo sets run").

The placebo percentile of compliance is read by one rule (:meth:`interventions.evidence.ArmEvidence.beyond_placebo`,
through :meth:`~interventions.evidence.ArmEvidence.specific`), at two counts of sets: the sets the arm drew
(``placebo_sets`` in :mod:`study.evidence`: the configured N) and the sets with a finite Δ
(:func:`interventions.select_compare.arm_verdict`, which also reads whether there are
:data:`~interventions.evidence.MIN_PLACEBO_SETS` of them). Two rules skip generations without changing any verdict
those readers give:

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

The placebo rank of a continuous outcome (:mod:`interventions.outcome_runs`) is read by one rule,
:func:`interventions.evidence.outcome_verdict`, at the configured N sets: every other reader reads its verdict
(claim 3's ``moves beyond placebo`` and "too few sets", claim 4's :func:`study.verdicts.gap_status`) or N itself
(claim 4's "19 or more sets"), and ``--select`` reads no outcome. :func:`outcome_reading` is that call.

3. **The outcomes, decided first and then sequential** (:func:`outcomes_fixed`). Every arm's own edits are
   teacher-forced first (together, one pass over the rows' batches). An arm whose outcomes can all be read without
   their placebo rank (``no effect`` or ``n/a`` on each: the verdict never reads the percentile there) teacher-forces
   no placebo set. The others teacher-force their sets :data:`WAVE` at a time, every arm that still needs sets
   together in one pass over the batches, until on every outcome of the arm :func:`outcome_reading` of the final N
   sets is the same whatever the undrawn sets show: the extreme completions of rule 2, not-finite ones always among
   them (an edit whose teacher-forced values overflow gives one). The first step is that stopping rule read at 0
   sets drawn: an outcome that moves is never fixed then (every set with it reads ``moves beyond placebo``, every
   one against it ``moves, within placebo``). Each outcome's placebo rank then holds the drawn sets' Δs and
   percentile and the number left ``undrawn`` (with ``skipped`` saying why where none was drawn), and
   :mod:`study.evidence` counts the drawn and the undrawn as the N sets.

All three rules apply from :data:`~interventions.evidence.MIN_PLACEBO_SETS` configured sets; fewer carry no verdict
and all run, to be read. ``--placebo-generation all`` runs every set of every arm, generated and teacher-forced. What
a run will draw cannot be known before its arms run, so its estimate counts a range (:func:`placebo_runs`): at
least the sets of arms with fewer than :data:`~interventions.evidence.MIN_PLACEBO_SETS` (every arm's own passes
always run), at most every set.

Example:
    >>> verdict_fixed(0.3, [0.5, 0.6], 20, nan_possible=False)   # two placebo Δs above a rise: never beyond 95%
    True
    >>> verdict_fixed(0.3, [0.0] * 10, 20, nan_possible=False)   # ten below: the next ten decide
    False
    >>> placebo_runs([20, 20, 5], "decide-first"), placebo_runs([20, 20, 5], "all")   # at least, at most
    ((5, 45), (45, 45))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict
from functools import partial

from interventions.evidence import MIN_PLACEBO_SETS, ArmEvidence, Difference, outcome_verdict
from interventions.outcome_kinds import OUTCOMES
from interventions.results import CapabilityResult, OutcomeResult
from interventions.stats import placebo_compare

DECIDE_LINE = "decide-first: an arm's placebo sets generate after it is judged, as its verdict needs"
DECIDE_OUTCOMES = "decide-first: an arm's placebo sets are teacher-forced after its own outcomes, as its verdicts need"
# why an arm teacher-forced none of its placebo sets: with none drawn, only outcomes that do not move are fixed (rule 3)
OUTCOMES_SKIPPED = "no outcome moves: each reads no effect or n/a, which no placebo rank changes"
WAVE = 4  # placebo sets an arm generates (or teacher-forces) together before the stopping rule is read again


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
    return _extremes_agree(lambda deltas: reading(delta, deltas, n_sets, counted), delta, drawn, n_sets, nan_possible)


def _extremes_agree(
    read: Callable[[list[float]], Hashable], delta: float, drawn: Sequence[float], n_sets: int, nan_possible: bool
) -> bool:
    """Whether ``read`` gives one reading on the extreme completions of the ``drawn`` Δs to ``n_sets`` (module doc,
    rule 2): every undrawn set above Δ, every one below, and (``nan_possible``) every one not finite."""
    left = n_sets - len(drawn)
    if left <= 0:
        return True
    centre = delta if math.isfinite(delta) else 0.0
    completions = [[centre + 1.0] * left, [centre - 1.0] * left] + ([[math.nan] * left] if nan_possible else [])
    return len({read([*drawn, *rest]) for rest in completions}) == 1


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


def outcome_reading(result: OutcomeResult, deltas: Sequence[float], n_sets: int) -> str:
    """The verdict on one continuous outcome of an arm (its Δ, CI and unedited mean) placed among ``deltas``, its
    placebo sets' Δs, counted as ``n_sets`` sets: :func:`interventions.evidence.outcome_verdict`, the one reader of
    the outcome's placebo rank (module doc, rule 3).

    >>> r = OutcomeResult("gap_closed", 36, 0.0, 0.3, 0.3, 0.2, 0.4)
    >>> outcome_reading(r, [0.0] * 20, 20), outcome_reading(r, [0.5, 0.6], 20), outcome_reading(r, [], 0)
    ('moves beyond placebo', 'moves, within placebo', 'moves, no placebo to place it')
    """
    percentile = placebo_compare(result.delta, deltas).percentile if deltas else None
    scale = result.before if OUTCOMES[result.outcome].relative and math.isfinite(result.before) else 1.0
    return outcome_verdict(result.outcome, result.delta, (result.ci_low, result.ci_high), percentile, n_sets, scale)


def outcomes_fixed(results: Sequence[OutcomeResult], drawn: Mapping[str, Sequence[float]], n_sets: int) -> bool:
    """Whether every outcome's :func:`outcome_reading` of all ``n_sets`` sets is fixed by the Δs of the sets drawn so
    far (``drawn``: per outcome), whatever the undrawn ones show, not-finite ones included (module doc, rule 3).

    >>> r = OutcomeResult("gap_closed", 36, 0.0, 0.3, 0.3, 0.2, 0.4)
    >>> outcomes_fixed([r], {"gap_closed": []}, 20), outcomes_fixed([r], {"gap_closed": [0.5, 0.6]}, 20)
    (False, True)
    """
    return all(
        _extremes_agree(partial(outcome_reading, r, n_sets=n_sets), r.delta, drawn.get(r.outcome, []), n_sets, True)
        for r in results
    )


def placebo_runs(sets: Sequence[int], design: str) -> tuple[int, int]:
    """How many of the arms' placebo sets (``sets``: each arm's count) run under ``--placebo-generation design``,
    generated or teacher-forced, at least and at most (module doc): with ``all`` every one; with ``decide-first`` at
    least those of arms with fewer than :data:`~interventions.evidence.MIN_PLACEBO_SETS`, at most every one."""
    least = sum(n for n in sets if design == "all" or n < MIN_PLACEBO_SETS)
    return least, sum(sets)
