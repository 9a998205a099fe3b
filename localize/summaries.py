"""What a faithfulness curve sums up to: f(k) with its CI, CPR and CMD, k for 50% and 80%, the placebo band, and how
well the estimates track the truth.

* **f(k)**: the gap closed by patching the ranking's top-k units, ``1 - mean KL(edited) / mean KL(unedited)`` over
  the rows (a ratio of means), with a 95% percentile bootstrap CI over rows. Every statistic of one report uses the
  same resampled rows (:class:`Resampled`), so differences between rankings and directions are paired.
* **CPR** and **CMD** (MIB, arXiv 2504.13151; ``evaluate_area_under_curve`` of its circuit track): the trapezoid
  area under f, and between f and 1 (``|1 - f|``), over the grid's points on a linear axis of the share of units
  (0.001 to 1 on MIB's grid). CPR: higher is better; CMD: lower.
* **CPR on the log k axis** (``cpr_log``): the same area over log10 of the share, divided by the decades the grid
  spans, so the mean f per decade of k. On MIB's linear axis the top decade (10-100%) is 90% of the width, and
  every ranking patches the same units at 100%; the log axis weighs each decade alike, so it reads how early a
  ranking's curve rises: the localisation the ranking verdict judges (:mod:`localize.verdicts`).
* **k50, k80**: the smallest grid point whose f reaches 0.5, 0.8 (none if no point does).
* **placebo band**: at each placebo point, the f of every random set of the same size (random rankings), and their
  percentiles.
* **estimated vs true**: each ranking's curve as the estimates predict it (the sum of its units' estimated shares
  closed, :mod:`access.relevance`), and the Pearson r between that and the patched curve over the grid's points.

Example:
    >>> x, f = np.array([0.001, 0.01, 1.0]), np.array([0.0, 0.5, 1.0])
    >>> round(float(cpr(x, f)), 4), round(float(cmd(x, f)), 4), round(float(cpr_log(x, f)), 4)
    (0.7447, 0.2542, 0.5833)
    >>> first_reaching([10, 20, 30], np.array([0.2, 0.6, 0.9]), 0.5)
    20
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localize.passes import RowGap

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """A statistic and its 95% percentile bootstrap CI."""

    value: float
    ci_low: float
    ci_high: float

    @classmethod
    def of(cls, value: float, samples: np.ndarray) -> Interval:
        finite = samples[np.isfinite(samples)]
        if not np.isfinite(value) or finite.size == 0:
            return cls(float(value), float("nan"), float("nan"))
        tail = 100 * (1 - CONFIDENCE) / 2
        low, high = np.percentile(finite, [tail, 100 - tail])
        return cls(float(value), float(low), float(high))


class Resampled:
    """One set of bootstrap resamples of the rows, shared by every statistic of a report (paired comparisons)."""

    def __init__(self, n_rows: int, n_resamples: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.index = rng.integers(0, n_rows, size=(n_resamples, n_rows))

    def gap(self, gap: RowGap) -> tuple[float, np.ndarray]:
        """The gap closed on all rows, and on each resample."""
        from access.outcomes import gap_closed

        with np.errstate(divide="ignore", invalid="ignore"):
            samples = 1.0 - gap.kl[self.index].mean(1) / gap.kl_unedited[self.index].mean(1)
        return gap_closed(gap.kl, gap.kl_unedited), samples


def cpr(x: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Area under f over ``x`` (last axis), by trapezoids: MIB's CPR."""
    return np.asarray(np.sum(np.diff(x) * (f[..., 1:] + f[..., :-1]) / 2, axis=-1))


def cpr_log(x: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Area under f over log10 ``x`` (last axis), by trapezoids, per decade spanned (NaN for a single point)."""
    if len(x) < 2 or x[-1] <= x[0]:
        return np.full(f.shape[:-1], np.nan)
    return np.asarray(cpr(np.log10(x), f) / np.log10(x[-1] / x[0]))


def cmd(x: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Area between f and 1 over ``x`` (last axis), by trapezoids of ``|1 - f|``: MIB's CMD."""
    gap = np.abs(1.0 - f)
    return np.asarray(np.sum(np.diff(x) * (gap[..., 1:] + gap[..., :-1]) / 2, axis=-1))


def first_reaching(units: Sequence[int], f: np.ndarray, level: float) -> int | None:
    """The smallest ``units`` whose f reaches ``level`` (points in increasing order), or None."""
    for count, value in zip(units, f, strict=True):
        if np.isfinite(value) and value >= level:
            return int(count)
    return None


def pearson(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Pearson r of two curves over their points (NaN with fewer than 3 finite pairs or a constant curve)."""
    from scipy.stats import pearsonr

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    if keep.sum() < 3 or np.ptp(x[keep]) == 0 or np.ptp(y[keep]) == 0:
        return float("nan")
    return float(pearsonr(x[keep], y[keep]).statistic)


@dataclass(frozen=True)
class Band:
    """The placebo sets' f at one point: how many, and their percentiles (1st, 5th, 50th, 95th, 99th)."""

    n_sets: int
    values: list[float]
    p01: float
    p05: float
    p50: float
    p95: float
    p99: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Band:
        finite = np.asarray([v for v in values if np.isfinite(v)], dtype=float)
        if finite.size == 0:
            nan = float("nan")
            return cls(0, [float(v) for v in values], nan, nan, nan, nan, nan)
        p = np.percentile(finite, [1, 5, 50, 95, 99])
        return cls(int(finite.size), [float(v) for v in values], *(float(v) for v in p))
