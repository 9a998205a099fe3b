"""How an arm's effect is read, fixed before any result is: a significant paired difference, beyond its placebos.

The A/B selection comparison (:mod:`interventions.select_compare`) and the study's verdicts (:mod:`study.verdicts`)
judge arms by these same rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

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
class ArmEvidence:
    """One intervention arm on the target capability, against the baseline of the model it ran on.

    ``percentile``: where Δ falls among ``placebo_sets`` placebo Δs (None without placebos).
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
