"""The held-out split's discrimination gate, fixed in docs/data.md before any model was evaluated on it.

The split passes when the base, SFT and DPO models *each* comply on between 10% and 90% (inclusive) of the rows of
*every* capability. It says whether a difference *can* show, in either direction; never which model is better.

Example:
    >>> rates = {m: {c: (30, 60) for c in CAPABILITIES} for m in MODELS}
    >>> discrimination_gate(rates).holds
    True
    >>> rates["dpo"]["nested"] = (58, 60)
    >>> print(discrimination_gate(rates).line())
    gate FAILS (each of base, SFT, DPO within 10-90% on every capability): dpo nested 96.7% > 90%
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from core.capabilities import ALL_CAPABILITIES

GATE_LOW, GATE_HIGH = 0.10, 0.90
MODELS: tuple[str, ...] = ("base", "sft", "dpo")
CAPABILITIES: tuple[str, ...] = tuple(c.value for c in ALL_CAPABILITIES)
RULE = "each of base, SFT, DPO within 10-90% on every capability"


@dataclass
class Gate:
    """``holds`` is None when the gate cannot be decided (a model or a capability was not judged)."""

    holds: bool | None
    failures: list[str] = field(default_factory=list)

    def line(self) -> str:
        if self.holds is None:
            return f"gate not decided ({RULE}): {'; '.join(self.failures)}"
        verdict = "holds" if self.holds else "FAILS"
        return f"gate {verdict} ({RULE})" + (f": {'; '.join(self.failures)}" if self.failures else "")


def discrimination_gate(rates: Mapping[str, Mapping[str, tuple[int, int]]]) -> Gate:
    """The gate on ``rates[model][capability] = (complying rows, judged rows)`` for base, SFT and DPO."""
    missing = [m for m in MODELS if m not in rates]
    if missing:
        return Gate(None, [f"no {m} model was evaluated (give --base)" for m in missing])
    undecided = [f"{m} {c}: no judged rows" for m in MODELS for c in CAPABILITIES if not rates[m].get(c, (0, 0))[1]]
    if undecided:
        return Gate(None, undecided)
    failures = []
    for m in MODELS:
        for c in CAPABILITIES:
            passed, n = rates[m][c]
            rate = passed / n
            if rate < GATE_LOW:
                failures.append(f"{m} {c} {rate:.1%} < {GATE_LOW:.0%}")
            elif rate > GATE_HIGH:
                failures.append(f"{m} {c} {rate:.1%} > {GATE_HIGH:.0%}")
    return Gate(not failures, failures)
