"""Per-capability judge summaries and agreement between two judges (rules vs LLM).

A compliance rate is only meaningful next to how many rows could not be scored, so
:func:`score_table` reports scored, compliant and undecided (``None``) counts per
capability. :func:`agreement` compares two judges on the rows both could score: the
raw agreement rate and Cohen's kappa (``sklearn.metrics.cohen_kappa_score``), which
discounts the agreement expected by chance. Kappa is undefined (``None``) when both
judges give one constant score, e.g. every row compliant.

Example:
    >>> from judging.base import Verdict
    >>> K = Capability.PRIORITY
    >>> a = [Verdict({K: s}) for s in (1, 1, 0, 0, None)]
    >>> b = [Verdict({K: s}) for s in (1, 0, 0, 0, 1)]
    >>> r = agreement(a, b)[K]
    >>> (r.n, r.agree, round(r.rate, 2), round(r.kappa, 2), r.skipped)
    (4, 3, 0.75, 0.5, 1)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.capabilities import ALL_CAPABILITIES, Capability
from core.errors import ProbeError
from judging.base import Verdict


@dataclass(frozen=True)
class CapabilityScore:
    """One judge on one capability: ``rate`` = compliant / scored (None if nothing scored)."""

    total: int
    scored: int
    compliant: int
    undecided: int
    rate: float | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", self.compliant / self.scored if self.scored else None)


@dataclass(frozen=True)
class Agreement:
    """Two judges on one capability, over the ``n`` rows both scored (``skipped`` had a None); ``rate`` = agree / n."""

    n: int
    agree: int
    rate: float | None = field(init=False)
    kappa: float | None
    skipped: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", self.agree / self.n if self.n else None)


def score_table(
    verdicts: Sequence[Verdict], capabilities: Sequence[Capability] = ALL_CAPABILITIES
) -> dict[Capability, CapabilityScore]:
    """Counts per capability over every verdict that has a score slot for it."""
    table: dict[Capability, CapabilityScore] = {}
    for cap in capabilities:
        values = [v.scores[cap] for v in verdicts if cap in v.scores]
        scored = [s for s in values if s is not None]
        table[cap] = CapabilityScore(
            len(values), len(scored), sum(1 for s in scored if s == 1), len(values) - len(scored)
        )
    return table


def agreement(rule_verdicts: Sequence[Verdict], llm_verdicts: Sequence[Verdict]) -> dict[Capability, Agreement]:
    """Agreement rate and Cohen's kappa per capability between two aligned verdict lists."""
    if len(rule_verdicts) != len(llm_verdicts):
        raise ProbeError(
            f"cannot compare judges over different rows: {len(rule_verdicts)} vs {len(llm_verdicts)} verdicts"
        )
    result: dict[Capability, Agreement] = {}
    for cap in ALL_CAPABILITIES:
        pairs = [
            (a.scores[cap], b.scores[cap])
            for a, b in zip(rule_verdicts, llm_verdicts, strict=True)
            if cap in a.scores and cap in b.scores
        ]
        if not pairs:
            continue
        both = [(x, y) for x, y in pairs if x is not None and y is not None]
        result[cap] = Agreement(len(both), sum(1 for x, y in both if x == y), _kappa(both), len(pairs) - len(both))
    return result


def _kappa(pairs: list[tuple[int, int]]) -> float | None:
    from sklearn.metrics import cohen_kappa_score

    if not pairs or len({v for pair in pairs for v in pair}) < 2:
        return None  # one label in total: chance agreement is 1 and kappa is 0/0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        value = float(cohen_kappa_score([x for x, _ in pairs], [y for _, y in pairs], labels=[0, 1]))
    return None if math.isnan(value) else value
