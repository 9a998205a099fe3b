"""The judge interface shared by the rule judge and the LLM judge.

Scores follow the paper's protocol: 1 if the response complies with the capability's
rubric, 0 if it does not. ``None`` means the judge could not decide (an LLM reply that
could not be parsed, or a row without the expectations the rule judge needs); such
cases are counted and reported separately, never silently scored 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from core.capabilities import Capability
from core.schema import TestRow


@dataclass(frozen=True)
class Verdict:
    scores: dict[Capability, int | None]
    reasons: dict[Capability, str] = field(default_factory=dict)


class Judge(Protocol):
    name: str

    def judge(self, rows: Sequence[TestRow], responses: Sequence[str]) -> list[Verdict]:
        """One verdict per (row, response), with a score for every capability of the row's task."""
        ...
