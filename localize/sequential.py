"""The sequential placebo band of ``probe localize`` (``--placebo-design sequential``, the default; fixed 2026-11-29,
before any default-pair result under it was read; docs/localize.md, "The placebo band, drawn sequentially").

The ranking verdict (:func:`localize.verdicts.ranking_verdict`) reads the placebo band at one place only: at each
verdict point (:data:`~localize.verdicts.VERDICT_POINTS`) of each direction, whether a ranking's f is above the
:data:`~localize.verdicts.PLACEBO_PERCENTILE` th percentile of the f of at least :data:`~localize.verdicts.MIN_PLACEBO`
random sets of that size; and it reads it only for a ranking whose CPR beats ``mean_diff``'s. So the random sets are
drawn as Besag and Clifford (1991) draw a Monte Carlo test's: :data:`WAVE` sets at a time (each set's index is its
seed, so the sets drawn are the first ones of the full design, the same in both directions), each wave in one call of
the shared engine, after the rankings' curves (the verdict needs their f first), and a **cell** (a direction and a
verdict point) stops drawing once the verdict can no longer change whatever its undrawn sets show:

* the verdict is computed by the reader's own code (:func:`~localize.verdicts.ranking_verdict`) on the band
  **completed**: the drawn sets' f and every undrawn set at one extreme, :data:`LOW` (below any f a pass gives) or
  :data:`HIGH` (above any);
* a cell draws another wave while, for some completion of the other cells, two completions of its own give different
  verdicts (:func:`pending`); the run stops when no cell is pending.

Why the extreme completions settle every completion: a percentile is non-decreasing in every value it is taken over,
so each reading "f above the band" can only turn false as undrawn values rise; a ranking beats both when all its
readings hold (its CPR comparison does not read the band), so the set of rankings that beat both, and so the verdict,
is monotone in every undrawn value and lies between its values at the extremes. An undrawn set's f is taken to be
finite: it is a ratio of mean KLs of finite log-probs, the patched values being the other checkpoint's own (a drawn
set that is not finite leaves fewer than :data:`~localize.verdicts.MIN_PLACEBO` finite sets, so its cell's reading is
"cannot be decided" whatever the rest show). Once nothing is pending, the verdict is the same for every completion of
every cell, and it is the full design's: the report gives it with the drawn sets, and says per cell how many were
drawn ("8 of 20, then the verdict could no longer change").

Every set is drawn where nothing reads the band sequentially: at a placebo point that is not a verdict point (the
band is shown, not read), and with fewer than :data:`~localize.verdicts.MIN_PLACEBO` configured sets (no verdict
reads them: all are drawn, to be seen). ``--placebo-design all`` draws every set (the fixed design).

Example:
    >>> from localize.verdicts import RankingEvidence
    >>> import numpy as np
    >>> def evidence(ranking, cpr, f): return RankingEvidence(ranking, "necessity", cpr, np.full(50, cpr),
    ...     {"0.2%": f, "2%": f}, {})
    >>> ranked = [evidence("mean_diff", 0.1, 0.1), evidence("relp", 0.5, 0.3)]
    >>> pending(ranked, {("necessity", "0.2%"): [0.6, 0.7], ("necessity", "2%"): [0.0]}, 20)
    []
    >>> pending(ranked, {("necessity", "0.2%"): [0.0, 0.1], ("necessity", "2%"): [0.0]}, 20)
    [('necessity', '0.2%'), ('necessity', '2%')]
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace

from localize.verdicts import MIN_PLACEBO, VERDICT_POINTS, RankingEvidence, Verdict, ranking_verdict

SEQUENTIAL, ALL = "sequential", "all"
PLACEBO_DESIGNS: tuple[str, ...] = (SEQUENTIAL, ALL)
WAVE = 4  # random sets a pending cell draws together (one engine call per direction) before the rule is read again
LOW, HIGH = -1e300, 1e300  # an undrawn set's f at the extremes: below and above any f a pass gives (f <= 1)

Cell = tuple[str, str]  # (direction, verdict point label)


def read_cells(directions: Sequence[str], placebo_labels: Sequence[str], n_sets: int) -> list[Cell]:
    """The cells whose sets are drawn sequentially: each direction's placebo points the verdict reads, when at least
    :data:`~localize.verdicts.MIN_PLACEBO` sets are configured (module doc); every other cell draws all its sets."""
    if n_sets < MIN_PLACEBO:
        return []
    return [(d, label) for d in directions for label in placebo_labels if label in VERDICT_POINTS]


def completions(drawn: Sequence[float], n_sets: int) -> list[list[float]]:
    """A cell's band completed to ``n_sets`` sets at each extreme (module doc); the drawn band alone when full."""
    left = n_sets - len(drawn)
    if left <= 0:
        return [list(drawn)]
    return [[*drawn, *[value] * left] for value in (LOW, HIGH)]


def verdict_with(evidence: Sequence[RankingEvidence], bands: Mapping[Cell, Sequence[float]]) -> Verdict:
    """:func:`~localize.verdicts.ranking_verdict` with each cell's band as given (cells not given: as they are)."""
    return ranking_verdict(
        [
            replace(
                e,
                placebo_at={
                    **e.placebo_at,
                    **{label: list(v) for (d, label), v in bands.items() if d == e.direction},
                },
            )
            for e in evidence
        ]
    )


def pending(evidence: Sequence[RankingEvidence], drawn: Mapping[Cell, Sequence[float]], n_sets: int) -> list[Cell]:
    """The cells whose undrawn sets could still change the verdict (module doc): for some completion of the other
    cells, two completions of the cell's own give different verdicts."""
    options = {cell: completions(values, n_sets) for cell, values in drawn.items()}
    memo: dict[tuple[tuple[Cell, int], ...], Verdict] = {}

    def verdict(choice: dict[Cell, int]) -> Verdict:
        key = tuple(sorted(choice.items()))
        if key not in memo:
            memo[key] = verdict_with(evidence, {cell: options[cell][k] for cell, k in choice.items()})
        return memo[key]

    out = []
    for cell in drawn:
        others = [c for c in drawn if c != cell]
        for corner in itertools.product(*(range(len(options[c])) for c in others)):
            fixed = dict(zip(others, corner, strict=True))
            if len({verdict({**fixed, cell: k}) for k in range(len(options[cell]))}) > 1:
                out.append(cell)
                break
    return out


def next_wave(
    evidence: Sequence[RankingEvidence], bands: Mapping[Cell, Sequence[float]], n_sets: int, read: Sequence[Cell]
) -> dict[Cell, int]:
    """The sets each cell holds after the next wave, for the cells that draw in it (``bands``: every cell's sets so
    far; ``read``: the cells drawn sequentially, :func:`read_cells`): a read cell still :func:`pending` draws
    :data:`WAVE` more, any other cell not yet full all the rest; ``{}`` when the band is done."""
    still = set(pending(evidence, {cell: bands[cell] for cell in read}, n_sets)) if read else set()
    return {
        cell: min(n_sets, len(values) + WAVE) if cell in read else n_sets
        for cell, values in bands.items()
        if len(values) < n_sets and (cell in still or cell not in read)
    }


def settled_verdict(evidence: Sequence[RankingEvidence], drawn: Mapping[Cell, Sequence[float]], n_sets: int) -> Verdict:
    """The verdict once nothing is :func:`pending`: the same for every completion of the undrawn sets (taken at
    :data:`LOW`)."""
    if pending(evidence, drawn, n_sets):
        raise ValueError("the verdict still depends on undrawn placebo sets")
    return verdict_with(evidence, {cell: completions(values, n_sets)[0] for cell, values in drawn.items()})


def drawn_line(drawn: Mapping[Cell, int], n_sets: int) -> str:
    """``necessity 0.2%: 8 of 20, ...`` for the cells that drew fewer than ``n_sets``; '' when every cell drew all."""
    short = [f"{d} {label}: {n} of {n_sets}" for (d, label), n in drawn.items() if n < n_sets]
    if not short:
        return ""
    return f"random sets drawn ({', '.join(short)}), then the verdict could no longer change"
