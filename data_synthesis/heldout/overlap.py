"""How much of the held-out split the training data has seen: shared word 8-grams, with a bound that fails.

Texts are compared turn by turn (every turn of a test row and its reference; every SFT turn; every DPO prompt turn,
``chosen`` and ``rejected``), as lowercase word sequences (:func:`core.constraints.words`), so an 8-gram never spans
two turns. The figure is the share of the held-out split's distinct 8-grams that occur anywhere in the training
files; the split fails the check above :data:`OVERLAP_BOUND` (1%).

Example:
    >>> from core.schema import TestRow, Turn
    >>> row = TestRow([Turn("user", "one two three four five six seven eight nine")], "ok", "x")
    >>> report = ngram_overlap([row], ["zero one two three four five six seven eight"])
    >>> report.shared, report.distinct, report.passed
    (1, 2, False)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from core.constraints import words
from core.rows import read_dpo_rows, read_sft_rows
from core.run_dir import DataDir
from core.schema import TestRow

NGRAM = 8
OVERLAP_BOUND = 0.01


@dataclass
class Overlap:
    """``shared`` of the held-out split's ``distinct`` n-grams occur in the training texts."""

    n: int
    distinct: int
    shared: int
    rows: int
    rows_with_shared: int
    bound: float
    against: str = ""
    examples: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.shared / self.distinct if self.distinct else 0.0

    @property
    def passed(self) -> bool:
        return self.share <= self.bound

    def line(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (
            f"{self.n}-gram overlap with {self.against or 'the training data'}: {self.shared} of {self.distinct} "
            f"distinct held-out {self.n}-grams ({self.share:.2%}), in {self.rows_with_shared} of {self.rows} rows: "
            f"{verdict} (bound {self.bound:.0%})"
        )


def ngrams(text: str, n: int = NGRAM) -> set[tuple[str, ...]]:
    tokens = words(text)
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def row_texts(row: TestRow) -> list[str]:
    return [*(t.content for t in row.question), row.reference]


def training_texts(data_dir: str | Path) -> Iterator[str]:
    """Every turn of ``sft.jsonl`` and every prompt turn, chosen and rejected reply of ``dpo.jsonl``."""
    data = DataDir(data_dir)
    for sft in read_sft_rows(data.sft):
        yield from (t.content for t in sft.conversations)
    for dpo in read_dpo_rows(data.dpo):
        yield from (t.content for t in dpo.prompt)
        yield dpo.chosen
        yield dpo.rejected


def ngram_overlap(
    rows: Sequence[TestRow], training: Iterable[str], n: int = NGRAM, bound: float = OVERLAP_BOUND, against: str = ""
) -> Overlap:
    """The share of the rows' distinct ``n``-grams that also occur in ``training`` (texts)."""
    per_row = [set().union(*(ngrams(t, n) for t in row_texts(row))) for row in rows]
    mine = set().union(*per_row) if per_row else set()
    seen: set[tuple[str, ...]] = set()
    for text in training:
        seen |= ngrams(text, n) & mine
    return Overlap(
        n,
        len(mine),
        len(seen),
        len(rows),
        sum(bool(r & seen) for r in per_row),
        bound,
        against,
        sorted(" ".join(g) for g in seen)[:5],
    )
