"""The statistics every stage reports with: one exact McNemar test, one Wilson interval, one paired bootstrap.

Evaluation (SFT vs DPO compliance), analysis (per-unit top-k membership) and interventions
(before vs after compliance) all compare *paired* 0/1 outcomes, so all three use the same
exact McNemar test: only discordant pairs carry information, and the p-value is the
two-sided binomial test of one discordant count out of both at 1/2. It is vectorised
because the analysis runs it on every unit of every layer at once. A difference of two
paired rates gets its interval from a bootstrap that resamples the *pairs* (prompts), via
:func:`scipy.stats.bootstrap` on the per-prompt differences.

Example:
    >>> mcnemar_p(np.array([10, 0]), np.array([0, 0])).round(4).tolist()
    [0.002, 1.0]
    >>> float(mcnemar_p(3, 3))
    1.0
    >>> [round(x, 3) for x in wilson(8, 10)]
    [0.49, 0.943]
    >>> paired_bootstrap_ci([1, 1, 1], [1, 1, 1])
    (0.0, 0.0)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# paired outcomes, one per prompt: a sequence or a 1-D array
Outcomes = Sequence[float] | np.ndarray


def mcnemar_p(n01: np.ndarray | int, n10: np.ndarray | int) -> np.ndarray:
    """Two-sided exact McNemar p-values from discordant counts (elementwise; 1.0 where there are none)."""
    n01 = np.asarray(n01, dtype=np.int64)
    n10 = np.asarray(n10, dtype=np.int64)
    total = n01 + n10
    from scipy import stats  # here, not at the top: importing scipy.stats takes 0.7 s, too long for `probe --help`

    p = 2.0 * stats.binom.cdf(np.minimum(n01, n10), total, 0.5)
    return np.clip(np.where(total == 0, 1.0, p), 0.0, 1.0)


def discordant(before: np.ndarray, after: np.ndarray) -> tuple[int, int]:
    """(1→0, 0→1) counts of paired 0/1 outcomes."""
    return int(np.sum((before == 1) & (after == 0))), int(np.sum((before == 0) & (after == 1)))


def wilson(passed: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson interval of a proportion; (nan, nan) when n == 0."""
    if n == 0:
        return float("nan"), float("nan")
    from scipy import stats

    ci = stats.binomtest(passed, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def paired(before: Outcomes, after: Outcomes) -> tuple[np.ndarray, np.ndarray]:
    """Two equal-length 1-D float arrays, or ``ValueError``."""
    b, a = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if b.shape != a.shape or b.ndim != 1:
        raise ValueError(f"paired outcomes must be two 1-D arrays of equal length, got {b.shape} and {a.shape}")
    return b, a


def paired_bootstrap_ci(
    before: Outcomes,
    after: Outcomes,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of mean(after − before), resampling pairs with replacement; (nan, nan) for none."""
    b, a = paired(before, after)
    diff = a - b
    if diff.size == 0:
        return float("nan"), float("nan")
    if np.all(diff == diff[0]):
        return float(diff[0]), float(diff[0])  # no variation: every resample gives the same mean
    from scipy import stats

    result = stats.bootstrap(
        (diff,),
        np.mean,
        confidence_level=confidence,
        n_resamples=n_resamples,
        method="percentile",
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)
