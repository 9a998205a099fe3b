"""The rows of a pair evaluation's tables, typed: one per capability (and ``overall``), one per group of rows.

:func:`training.evaluate.comparison_table` and :func:`training.evaluate.group_table` build them, ``eval.json``
stores them through the project's one record codec (:mod:`core.records`: fields in declaration order, so the file
keeps its keys and their order), and the reports read them back as the same types (``probe models eval``'s table,
the study's page, :class:`study.stored.EvalRecord`). A row written before a column existed reads with it left out:
every column past the rates and DPO − SFT may be absent.

Example:
    >>> from core.records import from_json, to_json
    >>> row = EvalRow("multi_turn", 10, 1.0, 0.9, -0.1, (-0.3, 0.0), 1.0)
    >>> to_json(row)
    {'capability': 'multi_turn', 'n': 10, 'sft_rate': 1.0, 'dpo_rate': 0.9, 'delta': -0.1, 'delta_ci': [-0.3, 0.0],
     'mcnemar_p': 1.0}
    >>> from_json(EvalRow, to_json(row)) == row, row.has_base
    (True, False)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from core.records import OMIT_NONE

NO_CI = (math.nan, math.nan)


@dataclass(frozen=True)
class EvalRow:
    """One capability (or ``overall``) of an evaluation's table: each model's pass count, rate and Wilson interval;
    DPO − SFT with its paired bootstrap interval and exact McNemar p; and, when the base model was judged, its
    columns and SFT − base."""

    capability: str
    n: int
    sft_pass: int | None = field(default=None, kw_only=True, metadata=OMIT_NONE)
    sft_rate: float
    sft_ci: tuple[float, float] | None = field(default=None, kw_only=True, metadata=OMIT_NONE)
    dpo_pass: int | None = field(default=None, kw_only=True, metadata=OMIT_NONE)
    dpo_rate: float
    dpo_ci: tuple[float, float] | None = field(default=None, kw_only=True, metadata=OMIT_NONE)
    delta: float
    delta_ci: tuple[float, float] = NO_CI
    mcnemar_p: float = math.nan
    base_pass: int | None = field(default=None, kw_only=True, metadata=OMIT_NONE)
    base_rate: float | None = field(default=None, kw_only=True, metadata=OMIT_NONE)
    base_ci: tuple[float, float] | None = field(default=None, kw_only=True, metadata=OMIT_NONE)
    sft_minus_base: float | None = field(default=None, kw_only=True, metadata=OMIT_NONE)
    sft_minus_base_ci: tuple[float, float] | None = field(default=None, kw_only=True, metadata=OMIT_NONE)
    base_mcnemar_p: float | None = field(default=None, kw_only=True, metadata=OMIT_NONE)

    @property
    def has_base(self) -> bool:
        """Whether the base model was judged (its columns are there)."""
        return self.base_rate is not None

    def rate(self, model: str) -> float | None:
        """The compliance rate of ``model`` (base, sft or dpo); None for a base that was not judged."""
        rates: dict[str, float | None] = {"base": self.base_rate, "sft": self.sft_rate, "dpo": self.dpo_rate}
        return rates[model]


@dataclass(frozen=True)
class GroupRow:
    """Row compliance of one ``group`` of test rows (held-out levels and priority variants), per model, with Wilson
    intervals; the base model's columns only when it was judged."""

    group: str
    n: int
    base_rate: float | None = field(default=None, kw_only=True, metadata=OMIT_NONE)
    base_ci: tuple[float, float] | None = field(default=None, kw_only=True, metadata=OMIT_NONE)
    sft_rate: float
    sft_ci: tuple[float, float]
    dpo_rate: float
    dpo_ci: tuple[float, float]

    def rate(self, model: str) -> tuple[float | None, tuple[float, float] | None]:
        """The rate of ``model`` (base, sft or dpo) and its interval; (None, None) for a base that was not judged."""
        found: dict[str, tuple[float | None, tuple[float, float] | None]] = {
            "base": (self.base_rate, self.base_ci),
            "sft": (self.sft_rate, self.sft_ci),
            "dpo": (self.dpo_rate, self.dpo_ci),
        }
        return found[model]
