"""How an arm's effect is read, fixed before any result is: a significant paired difference, beyond its placebos.

The A/B selection comparison (:mod:`interventions.select_compare`) and the study's verdicts (:mod:`study.verdicts`)
judge arms by these same rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from interventions.outcome_kinds import OUTCOMES
from interventions.stats import PairedDelta

ALPHA = 0.05  # two-sided: a paired difference counts when its 95% CI excludes 0 and its exact McNemar p is below this
PLACEBO_PERCENTILE = (
    95.0  # the real Δ must lie at or above this percentile of its placebo Δs (at or below 100 − this for a drop)
)
MIN_PLACEBO_SETS = 19  # fewer sets cannot put Δ beyond 95% of them with an empirical p ≤ 0.05 (p = 1/(R+1))


@dataclass(frozen=True)
class Difference(PairedDelta):
    """A paired difference of compliance rates on the same rows (:class:`~interventions.stats.PairedDelta`:
    ``after − before`` with its 95% CI and exact McNemar p), as the rules read it."""

    def significant(self) -> bool:
        """CI excludes 0 and McNemar p < :data:`ALPHA` (on the side of ``delta``)."""
        if not all(math.isfinite(v) for v in (self.delta, self.ci_low, self.ci_high, self.p_value)) or self.n == 0:
            return False
        return self.p_value < ALPHA and (self.ci_low > 0 < self.delta or self.ci_high < 0 > self.delta)

    def sign(self) -> int:
        return 0 if not math.isfinite(self.delta) or self.delta == 0 else (1 if self.delta > 0 else -1)


@dataclass(frozen=True)
class OutcomeEvidence:
    """One continuous outcome of an arm as the rules read it (:class:`interventions.results.OutcomeResult`): Δ, its
    95% CI, where it falls among ``placebo_sets`` placebo sets (among ``drawn`` of them where the rest were not
    teacher-forced once the verdict was fixed, :mod:`interventions.sequential`), and its verdict
    (:func:`outcome_verdict`, read at ``placebo_sets``)."""

    outcome: str
    delta: float
    ci_low: float
    ci_high: float
    percentile: float | None = None
    placebo_sets: int = 0
    verdict: str = "n/a"
    drawn: int | None = None  # placebo sets teacher-forced for the percentile, where fewer than ``placebo_sets``

    def beyond(self, sign: int) -> bool:
        """The outcome moves beyond its placebos with the sign ``sign`` (+1 or -1)."""
        return self.verdict == MOVES and (self.delta > 0 if sign > 0 else self.delta < 0)


@dataclass(frozen=True)
class ArmEvidence:
    """One intervention arm on the target capability, against the baseline of the model it ran on.

    ``percentile``: where Δ falls among ``placebo_sets`` placebo Δs (None without placebos); among ``generated`` of
    them where the rest were not generated once the verdict was fixed (:mod:`interventions.sequential`).
    ``rounds_to_one``: the edit changes no value of the model's dtype (the no-op guard's
    ``changed_fraction_in_dtype`` is 0). ``faults``: the guard's reasons the generations are broken.
    """

    name: str
    model: str
    effect: Difference
    factor: float | None = None
    dtype: str = "float32"
    placebo_sets: int = 0
    percentile: float | None = None
    rounds_to_one: bool = False
    rows_changed: int = 0
    faults: tuple[str, ...] = field(default_factory=tuple)
    outcomes: tuple[OutcomeEvidence, ...] = field(default_factory=tuple)  # the continuous outcomes, where it has them
    generated: int | None = None  # placebo sets generated for the percentile, where fewer than ``placebo_sets``

    def outcome(self, name: str) -> OutcomeEvidence | None:
        """The continuous outcome ``name`` (``gap_closed``, ``margin_change``, ...), None where it has none."""
        return next((o for o in self.outcomes if o.outcome == name), None)

    def beyond_placebo(self) -> bool:
        """Enough placebo sets, and Δ at or beyond the :data:`PLACEBO_PERCENTILE` of theirs on its own side."""
        if self.placebo_sets < MIN_PLACEBO_SETS or self.percentile is None or not math.isfinite(self.percentile):
            return False
        return (
            self.percentile >= PLACEBO_PERCENTILE
            if self.effect.delta > 0
            else self.percentile <= 100.0 - PLACEBO_PERCENTILE
        )

    def specific(self) -> bool:
        """A specific effect: significant (:meth:`Difference.significant`) and beyond its placebos,
        on valid generations."""
        return not self.faults and self.effect.significant() and self.beyond_placebo()


# --- the continuous outcomes (access.outcomes), fixed 2026-11-27 before any default-pair outcome was read -------------
# (the smallest Δ that counts, per outcome: its row's floor in interventions.outcome_kinds)

MOVES = "moves beyond placebo"
WITHIN_PLACEBO = "moves, within placebo"
UNPLACED = "moves, no placebo to place it"
NO_EFFECT = "no effect"
UNDEFINED = "n/a"
OUTCOME_VERDICTS: tuple[str, ...] = (MOVES, WITHIN_PLACEBO, UNPLACED, NO_EFFECT, UNDEFINED)


def outcome_verdict(
    outcome: str,
    delta: float,
    ci: tuple[float, float],
    percentile: float | None,
    placebo_sets: int,
    scale: float = 1.0,
) -> str:
    """The verdict on one continuous outcome of one arm (docs/interventions.md, "Continuous outcomes").

    ``n/a``: Δ or its CI is not finite (no rows, or no gap to close). ``no effect``: the 95% CI holds 0, or |Δ| is
    below the outcome's floor (:attr:`interventions.outcome_kinds.Outcome.floor`; ``scale`` multiplies it: for
    ``kl``, the mean unedited KL). Else the outcome moves, and is ``moves beyond placebo`` when at least
    :data:`MIN_PLACEBO_SETS` placebo sets ran and Δ lies at or beyond their :data:`PLACEBO_PERCENTILE` on its own
    side, ``moves, within placebo`` when they ran and it does not, ``moves, no placebo to place it`` when fewer ran.

    >>> outcome_verdict("gap_closed", 0.4, (0.3, 0.5), 100.0, 20)
    'moves beyond placebo'
    >>> outcome_verdict("gap_closed", 0.004, (0.003, 0.005), 100.0, 20)   # below 1% of the gap
    'no effect'
    >>> outcome_verdict("margin_change", -0.5, (-0.9, -0.2), 60.0, 20)
    'moves, within placebo'
    """
    low, high = ci
    if not all(math.isfinite(v) for v in (delta, low, high)):
        return UNDEFINED
    if low <= 0 <= high or abs(delta) < OUTCOMES[outcome].floor * scale:
        return NO_EFFECT
    if placebo_sets < MIN_PLACEBO_SETS or percentile is None or not math.isfinite(percentile):
        return UNPLACED
    beyond = percentile >= PLACEBO_PERCENTILE if delta > 0 else percentile <= 100.0 - PLACEBO_PERCENTILE
    return MOVES if beyond else WITHIN_PLACEBO
