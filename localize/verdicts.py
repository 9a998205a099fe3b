"""The two verdicts of ``probe localize``, fixed in code and in docs/localize.md before any default-pair result was
read (2026-11-29).

**Which ranking localises the change best** (:func:`ranking_verdict`). Each ranking's score is its CPR on the log k
axis (the mean f per decade of k, :func:`localize.summaries.cpr_log`: MIB's linear CPR is 90% the top decade, where
every ranking converges on the same units) averaged over the directions measured (bootstrap resamples of the rows
shared by every ranking and direction):

* the **best** ranking has the highest score; it is *clearly* best when the 95% CI of its score minus the
  runner-up's lies above 0, else it is best *tied* with the runner-up;
* a ranking **beats both mean_diff and the placebo** when, in every direction measured, (a) the 95% CI of its log-k
  CPR minus ``mean_diff``'s lies above 0, and (b) at each verdict point (:data:`VERDICT_POINTS`, 0.2% and 2% of the
  units) its f is above the 99th percentile of the f of at least :data:`MIN_PLACEBO` random sets of that size. With
  fewer placebo sets, a verdict point off the grid, or ``mean_diff`` not measured, that part cannot be decided.

**Claim 1c, "the change is carried in the window"** (:func:`window_carries_change`). The window is the paper's
layers 12-31 of 32 scaled by depth (11-29 of 30); patching every attention and MLP output of its layers at once:

* *supported*: the window holds at most :data:`WINDOW_SHARE` (Y = 2/3) of the layers, and in every direction measured
  the lower end of the 95% CI of the gap it closes is at least :data:`WINDOW_CLOSES` (X = 80%);
* *not supported*: in some direction the upper end of that CI is below X;
* *inconclusive*: otherwise; *n/a* when there is no gap to close, no window arm, or the window holds more than Y.

It is the causal counterpart of claim 1 (the window's share of the discrepancy): claim 1 asks where the activations
moved, claim 1c where the change that moves the output is carried.

Example:
    >>> window_carries_change([WindowResult("necessity", 0.9, 0.85, 0.95)], layers=19, total=30).verdict
    'supported'
    >>> window_carries_change([WindowResult("necessity", 0.9, 0.7, 0.95)], layers=19, total=30).verdict
    'inconclusive'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analysis.rankings import MEAN_DIFF
from interventions.cells import fmt_percentile

WINDOW_CLOSES = 0.80  # X: the share of the gap the window must close
WINDOW_SHARE = 2 / 3  # Y: the share of the layers it may hold at most (the paper's 20 of 32 is 0.625)
VERDICT_POINTS: tuple[str, ...] = ("0.2%", "2%")  # grid labels the ranking verdict reads against the placebo band
MIN_PLACEBO = 20  # placebo sets needed at a verdict point
PLACEBO_PERCENTILE = 99


@dataclass(frozen=True)
class Verdict:
    """A verdict and the sentence that says why."""

    verdict: str
    reason: str


@dataclass(frozen=True)
class WindowResult:
    """The window arm's gap closed in one direction, with its 95% CI."""

    direction: str
    value: float
    ci_low: float
    ci_high: float


def window_carries_change(results: Sequence[WindowResult], layers: int, total: int) -> Verdict:
    """Claim 1c (module doc): ``results`` per direction of the window arm; ``layers`` of ``total`` in the window."""
    share = layers / total if total else float("nan")
    said = ", ".join(f"{r.direction} {r.value:.1%} [{r.ci_low:.1%}, {r.ci_high:.1%}]" for r in results)
    if not results or not all(np.isfinite([r.value, r.ci_low, r.ci_high]).all() for r in results):
        return Verdict("n/a", f"no gap closed to judge ({said or 'no window arm'})")
    if share > WINDOW_SHARE:
        return Verdict("n/a", f"the window holds {layers} of {total} layers, more than {WINDOW_SHARE:.0%}")
    head = f"the window ({layers} of {total} layers, {share:.0%}) closes {said} of the gap"
    if all(r.ci_low >= WINDOW_CLOSES for r in results):
        return Verdict("supported", f"{head}: at least {WINDOW_CLOSES:.0%} in every direction")
    if any(r.ci_high < WINDOW_CLOSES for r in results):
        return Verdict("not supported", f"{head}: below {WINDOW_CLOSES:.0%} in some direction")
    return Verdict("inconclusive", f"{head}: its CI holds {WINDOW_CLOSES:.0%}")


@dataclass(frozen=True)
class RankingEvidence:
    """One ranking in one direction: its CPR on the log k axis on all rows and on each shared resample, and its f at
    the verdict points with the placebo sets' f there."""

    ranking: str
    direction: str
    cpr: float
    cpr_samples: np.ndarray
    f_at: dict[str, float]  # verdict point label -> f
    placebo_at: dict[str, list[float]]  # verdict point label -> the placebo sets' f


def ranking_verdict(evidence: Sequence[RankingEvidence]) -> Verdict:
    """Which ranking localises best, and whether any beats both ``mean_diff`` and the placebo (module doc)."""
    rankings = list(dict.fromkeys(e.ranking for e in evidence))
    directions = list(dict.fromkeys(e.direction for e in evidence))
    if not rankings:
        return Verdict("n/a", "no ranking measured")
    scores = {r: _score(evidence, r) for r in rankings}
    order = sorted(rankings, key=lambda r: -scores[r][0] if np.isfinite(scores[r][0]) else np.inf)
    best = order[0]
    best_text = f"{best} localises the change best (mean CPR on the log k axis {scores[best][0]:.3f})"
    if len(order) > 1:
        runner = order[1]
        low = _low(scores[best][1] - scores[runner][1])
        best_text += f", clearly ahead of {runner}" if low > 0 else f", tied with {runner} within the 95% CI"
    beats = _beating(evidence, rankings, directions)
    return Verdict(best if beats[0] else f"{best} (none beats mean_diff and the placebo)", f"{best_text}; {beats[1]}")


def _score(evidence: Sequence[RankingEvidence], ranking: str) -> tuple[float, np.ndarray]:
    mine = [e for e in evidence if e.ranking == ranking]
    return float(np.mean([e.cpr for e in mine])), np.mean([e.cpr_samples for e in mine], axis=0)


def _low(samples: np.ndarray) -> float:
    finite = samples[np.isfinite(samples)]
    return float(np.percentile(finite, 2.5)) if finite.size else float("nan")


def _beating(evidence: Sequence[RankingEvidence], rankings: list[str], directions: list[str]) -> tuple[bool, str]:
    """(whether some ranking beats both, the sentence)."""
    if MEAN_DIFF not in rankings:
        return False, "whether a ranking beats mean_diff cannot be decided: mean_diff was not measured"
    found = {(e.ranking, e.direction): e for e in evidence}
    winners, undecided = [], []
    for ranking in (r for r in rankings if r != MEAN_DIFF):
        results = [_beats(found[(ranking, d)], found[(MEAN_DIFF, d)]) for d in directions]
        if all(r is True for r in results):
            winners.append(ranking)
        elif None in results and False not in results:
            undecided.append(ranking)
    if winners:
        return (
            True,
            f"{', '.join(winners)} beat(s) both mean_diff and the {fmt_percentile(PLACEBO_PERCENTILE)} placebo "
            "percentile",
        )
    tail = f" ({', '.join(undecided)}: cannot be decided)" if undecided else ""
    return (
        False,
        f"no ranking beats both mean_diff and the {fmt_percentile(PLACEBO_PERCENTILE)} placebo percentile{tail}",
    )


def _beats(mine: RankingEvidence, reference: RankingEvidence) -> bool | None:
    """True, False, or None (cannot be decided: too few placebo sets, or a verdict point off the grid)."""
    if not _low(mine.cpr_samples - reference.cpr_samples) > 0:
        return False
    for point in VERDICT_POINTS:
        placebo = [v for v in mine.placebo_at.get(point, []) if np.isfinite(v)]
        if point not in mine.f_at or len(placebo) < MIN_PLACEBO:
            return None
        if not mine.f_at[point] > np.percentile(placebo, PLACEBO_PERCENTILE):
            return False
    return True
