"""The paired-delta table: its cells, its columns, and one renderer each for markdown, the terminal and HTML.

Every table that shows a paired difference (the A/B arm, summary and dose tables, ``--select``'s comparison,
lm-eval's benchmark table, ``probe models eval``, the study's HTML) is a list of :class:`Row` rendered through a
list of :class:`Column`: the standard columns (:data:`N`, :data:`BEFORE`, :data:`AFTER`, :data:`DELTA`,
:data:`CI`, :data:`P`, :data:`PLACEBO`, :data:`CHANGED`, :data:`VERDICT`) plus the table's own
(:func:`extra`). A cell is formatted here and nowhere else, so a Δ, a CI, a p and a placebo percentile read the
same in every table:

- a rate ``90.5%``; a difference of rates in percentage points ``+1.5``; a CI ``[+0.5, +2.5]``;
- a p-value ``0.010`` (``4.0e-04`` below 0.001);
- the placebo percentile ``72nd (p = 0.333, 20 sets)``: where Δ falls among the placebo sets' Δs, the empirical
  two-sided p, and how many sets;
- a missing value ``n/a``, a cell that does not apply ``—``.

A metric that is not 0/1 per item (lm-eval's perplexity, BLEU) is shown in its own units (``binary=False``).
Prose (a verdict's reason) says the same numbers through :func:`effect_sentence`.

Example:
    >>> from interventions.stats import PairedDelta
    >>> row = Row(PairedDelta(200, 0.6, 0.75, 0.15, 0.08, 0.22, 0.0004), placebo=Placement(72.5, 1 / 3, 20))
    >>> print("\\n".join(markdown([N, BEFORE, AFTER, DELTA, CI, P, PLACEBO], [row])))
    | n | before | after | Δ (pts) | 95% CI | McNemar p | placebo percentile |
    |---:|---:|---:|---:|---|---:|---|
    | 200 | 60.0% | 75.0% | +15.0 | [+8.0, +22.0] | 4.0e-04 | 72nd (p = 0.333, 20 sets) |
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

from interventions.stats import PairedDelta

if TYPE_CHECKING:
    from rich.table import Table

    from interventions.results import PlaceboRank
    from training.eval_rows import EvalRow

NA = "n/a"  # a value that is missing or not finite
NONE = "—"  # a cell that does not apply to the row
T = TypeVar("T")


def fmt_pct(x: float | None) -> str:
    """A rate in percent: ``90.5%``."""
    return NA if x is None or not math.isfinite(x) else f"{100 * x:.1f}%"


def fmt_delta(x: float | None) -> str:
    """A difference of proportions in percentage points: ``+1.5``."""
    return NA if x is None or not math.isfinite(x) else f"{100 * x:+.1f}"


def fmt_outcome(x: float, percent: bool = False) -> str:
    """A continuous outcome in a sentence, to three significant digits so that a gap of 1e-6 does not read as 0:
    ``+12.5%`` for a share (``percent``), ``-0.85`` otherwise."""
    if not math.isfinite(x):
        return "n/a"
    return f"{100 * x:+.3g}%" if percent else f"{x:+.3g}"


def fmt_p(p: float | None) -> str:
    """A p-value: ``0.010``, ``4.0e-04`` below 0.001."""
    if p is None or not math.isfinite(p):
        return NA
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def fmt_percentile(x: float) -> str:
    """A percentile as an ordinal: 1st, 2nd, 3rd, 11th, 72nd, 100th.

    >>> [fmt_percentile(x) for x in (0.4, 2.5, 11, 72.5, 100)]
    ['0th', '2nd', '11th', '72nd', '100th']
    """
    n = round(x)  # half to even, as the former "{:.0f}th"
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def fmt_value(x: float | None, binary: bool = True) -> str:
    """A score: a rate in percent where the metric is 0/1 per item, else in its own units (``12.35``)."""
    if binary or x is None or not math.isfinite(x):
        return fmt_pct(x)
    return f"{x:.4g}"


def fmt_change(x: float | None, binary: bool = True) -> str:
    """A difference of scores: in percentage points where the metric is 0/1 per item, else in its own units."""
    if binary or x is None or not math.isfinite(x):
        return fmt_delta(x)
    return f"{x:+.4g}"


def fmt_ci(low: float | None, high: float | None, binary: bool = True) -> str:
    """A 95% CI of a difference: ``[+0.5, +2.5]`` (``—`` where there is none)."""
    if low is None and high is None:
        return NONE
    return f"[{fmt_change(low, binary)}, {fmt_change(high, binary)}]"


def fmt_rate_ci(rate: float | None, ci: Sequence[float] | None) -> str:
    """A rate with its own 95% interval: ``90.5% [85.0, 95.0]``."""
    if not ci:
        return fmt_pct(rate)
    return f"{fmt_pct(rate)} [{_points(ci[0])}, {_points(ci[1])}]"


def _points(x: float | None) -> str:
    return NA if x is None or not math.isfinite(x) else f"{100 * x:.1f}"


def fmt_per_unit(delta: float | None, size: int) -> str:
    """A difference in percentage points shared out over ``size`` units: ``+0.023``."""
    return NA if delta is None or not math.isfinite(delta) or not size else f"{100 * delta / size:+.3f}"


def fmt_range(least: T, most: T, fmt: Callable[[T], str] = str) -> str:
    """An estimate that cannot be known in advance: ``4 to 24``, or ``24`` where both ends read alike.

    >>> fmt_range(4, 24), fmt_range(24, 24), fmt_range(0.1, 0.2, lambda s: f"{s:.0f} s")
    ('4 to 24', '24', '0 s')
    """
    low, high = fmt(least), fmt(most)
    return high if low == high else f"{low} to {high}"


def fmt_count(part: int, whole: int) -> str:
    return f"{part}/{whole}"


@dataclass(frozen=True)
class Placement:
    """Where a real Δ falls among its placebo sets' Δs: the percentile, the empirical two-sided p, how many sets;
    ``configured``: the sets the arm has, where it drew fewer (:mod:`interventions.sequential`)."""

    percentile: float
    p_empirical: float
    sets: int
    configured: int | None = None

    @classmethod
    def of(cls, rank: PlaceboRank | None, sets: int | None = None) -> Placement | None:
        """From an arm's :class:`~interventions.results.PlaceboRank` (``sets``: its count, else its Δs')."""
        if rank is None:
            return None
        drawn = len(rank.deltas) if sets is None else sets
        return cls(rank.percentile, rank.p_empirical, drawn, drawn + rank.undrawn if rank.undrawn else None)


def fmt_placement(placement: Placement | None) -> str:
    """The one surface form of a placebo percentile: ``72nd (p = 0.333, 20 sets)`` (``—`` without placebos; ``4 of
    20 sets`` where the arm drew 4 of its 20 once its verdict was fixed).

    >>> fmt_placement(Placement(72.5, 1 / 3, 20)), fmt_placement(None), fmt_placement(Placement(25.0, 0.8, 4, 20))
    ('72nd (p = 0.333, 20 sets)', '—', '25th (p = 0.800, 4 of 20 sets)')
    >>> fmt_placement(Placement(math.nan, math.nan, 0, 20))
    '0 of 20 sets drawn'
    """
    if placement is None or not (placement.sets or placement.configured):
        return NONE
    sets = f"{placement.sets} of {placement.configured} sets" if placement.configured else f"{placement.sets} sets"
    if not placement.sets:
        return f"{sets} drawn"
    if not math.isfinite(placement.percentile):
        return NA
    return f"{fmt_percentile(placement.percentile)} (p = {fmt_p(placement.p_empirical)}, {sets})"


def effect_sentence(
    effect: PairedDelta,
    placement: Placement | None = None,
    changed: tuple[int, int] | None = None,
    *,
    rates: bool = False,
    placebo: bool = True,
) -> str:
    """A paired difference in prose, as a verdict's reason says it: the rates and n (``rates``), Δ with its CI, the
    McNemar p, where Δ falls among its placebo sets (``placebo``), the generations that changed (``changed``).

    >>> d = PairedDelta(200, 0.6, 0.75, 0.15, 0.08, 0.22, 0.0004)
    >>> effect_sentence(d, Placement(96.0, 0.05, 20), (30, 200))
    'Δ +15.0 pts [+8.0, +22.0], McNemar p 4.0e-04, 96th percentile of 20 placebo sets, 30/200 generations changed'
    >>> effect_sentence(d, rates=True, placebo=False)
    '60.0% → 75.0% (n 200), Δ +15.0 pts [+8.0, +22.0], McNemar p 4.0e-04'
    """
    parts = [
        f"Δ {fmt_delta(effect.delta)} pts {fmt_ci(effect.ci_low, effect.ci_high)}",
        f"McNemar p {fmt_p(effect.p_value)}",
    ]
    if rates:
        parts.insert(0, f"{fmt_pct(effect.before)} → {fmt_pct(effect.after)} (n {effect.n})")
    if placebo:
        placed = placement is not None and placement.sets and math.isfinite(placement.percentile)
        parts.append(
            f"{fmt_percentile(placement.percentile)} percentile of {placement.sets} placebo sets"
            if placed and placement is not None
            else "no placebo sets"
        )
    if changed is not None:
        parts.append(f"{fmt_count(*changed)} generations changed")
    return ", ".join(parts)


class Strong(str):
    """A cell to stand out (the target capability): bold in markdown and HTML, marked `` *`` on the terminal."""


@dataclass(frozen=True)
class Row:
    """One row of a paired-delta table.

    ``effect``: the paired difference. ``binary``: its scores are 0/1 per item (rates in percent, Δ in points),
    else in the metric's own units and no McNemar p. ``flips``: show McNemar's lost/gained beside p.
    ``placebo``: where Δ falls among its placebo sets. ``changed``: (changed, of) generations or items.
    ``verdict``: the table's verdict cell. ``extra``: the table's own cells, by key (:func:`extra`).
    """

    effect: PairedDelta
    binary: bool = True
    flips: bool = False
    placebo: Placement | None = None
    changed: tuple[int, int] | None = None
    verdict: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Column:
    """A column: its header, how it draws a row's cell, and whether it holds numbers (right-aligned)."""

    header: str
    cell: Callable[[Row], str]
    numeric: bool = True

    def named(self, header: str) -> Column:
        """The same column under another header (``SFT`` for :data:`BEFORE`)."""
        return replace(self, header=header)


def _p_cell(row: Row) -> str:
    e = row.effect
    if not row.binary:
        return NONE
    return fmt_p(e.p_value) + (f" ({e.lost}↓ {e.gained}↑)" if row.flips else "")


N = Column("n", lambda r: str(r.effect.n))
BEFORE = Column("before", lambda r: fmt_value(r.effect.before, r.binary))
AFTER = Column("after", lambda r: fmt_value(r.effect.after, r.binary))
BEFORE_AFTER = Column(
    "before → after", lambda r: f"{fmt_value(r.effect.before, r.binary)} → {fmt_value(r.effect.after, r.binary)}", False
)
DELTA = Column("Δ (pts)", lambda r: fmt_change(r.effect.delta, r.binary))
CI = Column("95% CI", lambda r: fmt_ci(r.effect.ci_low, r.effect.ci_high, r.binary), False)
P = Column("McNemar p", _p_cell)
PLACEBO = Column("placebo percentile", lambda r: fmt_placement(r.placebo), False)
CHANGED = Column("generations changed", lambda r: NONE if r.changed is None else fmt_count(*r.changed))
VERDICT = Column("verdict", lambda r: r.verdict or NONE, False)


def extra(key: str, header: str | None = None, numeric: bool = False) -> Column:
    """A table's own column: the row's ``extra[key]`` (``—`` where the row has none)."""
    return Column(key if header is None else header, lambda r: r.extra.get(key, NONE), numeric)


def markdown(columns: Sequence[Column], rows: Sequence[Row]) -> list[str]:
    """The table as markdown lines: header, alignment, one line per row."""

    def cell(text: str) -> str:
        return f"**{text}**" if isinstance(text, Strong) else text

    return [
        "| " + " | ".join(c.header for c in columns) + " |",
        "|" + "|".join("---:" if c.numeric else "---" for c in columns) + "|",
        *("| " + " | ".join(cell(c.cell(r)) for c in columns) + " |" for r in rows),
    ]


def html_table(columns: Sequence[Column], rows: Sequence[Row]) -> str:
    """The table as HTML, every cell escaped."""

    def cell(text: str) -> str:
        return f"<b>{html.escape(text)}</b>" if isinstance(text, Strong) else html.escape(text)

    head = "".join(f"<th>{html.escape(c.header)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{cell(c.cell(r))}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def terminal(columns: Sequence[Column], rows: Sequence[Row], title: str | None = None) -> Table:
    """The table as a rich :class:`~rich.table.Table` (cells as plain text, never read as markup)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    for k, c in enumerate(columns):
        table.add_column(c.header, justify="right" if c.numeric else "left", no_wrap=k == 0)
    for r in rows:
        cells = [c.cell(r) for c in columns]
        table.add_row(*(Text(f"{t} *" if isinstance(t, Strong) else t) for t in cells))
    return table


# --- the pair evaluation's table (the rows of training.evaluate.comparison_table) -------------------------------------


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def evaluation_row(row: EvalRow, capability: Callable[[str], str] = str) -> Row:
    """One row of ``probe models eval``'s table (:class:`training.eval_rows.EvalRow`): DPO − SFT as the paired
    difference, the base model's columns (where it was evaluated) as the table's own cells (``capability`` marks the
    name: :class:`Strong` for the target)."""
    effect = PairedDelta(row.n, row.sft_rate, row.dpo_rate, row.delta, *row.delta_ci, row.mcnemar_p)
    cells = {
        "capability": capability(row.capability),
        "sft": fmt_rate_ci(row.sft_rate, row.sft_ci),
        "dpo": fmt_rate_ci(row.dpo_rate, row.dpo_ci),
    }
    if row.has_base:
        low, high = row.sft_minus_base_ci or (math.nan, math.nan)
        base = Row(
            PairedDelta(
                effect.n,
                _or_nan(row.base_rate),
                row.sft_rate,
                _or_nan(row.sft_minus_base),
                low,
                high,
                _or_nan(row.base_mcnemar_p),
            )
        )
        cells |= {
            "base": BEFORE.cell(base),
            "base_ci": fmt_rate_ci(row.base_rate, row.base_ci),
            "sft_minus_base": DELTA.cell(base),
            "sft_minus_base_ci": CI.cell(base),
            "base_p": P.cell(base),
        }
    return Row(effect, extra=cells)


def evaluation_columns(base: bool, intervals: bool = False) -> list[Column]:
    """The pair evaluation's columns: with the base model's (``base``), with each rate's Wilson interval
    (``intervals``, the terminal's)."""
    sft, dpo = (extra("sft", "SFT", True), extra("dpo", "DPO", True)) if intervals else (BEFORE, AFTER)
    base_columns = [
        extra("base_ci" if intervals else "base", "base", True),
        extra("sft_minus_base", "SFT − base (pts)", True),
        extra("sft_minus_base_ci", "95% CI (SFT − base)"),
        extra("base_p", "McNemar p (base/SFT)", True),
    ]
    return [
        extra("capability"),
        N,
        *(base_columns if base else []),
        sft.named("SFT"),
        dpo.named("DPO"),
        DELTA.named("DPO − SFT (pts)"),
        CI,
        P,
    ]
