"""Paired statistics for before/after compliance, and where a real effect sits among placebos.

Compliance is a 0/1 outcome per prompt, measured twice on the *same* prompts, so the
right tools are paired ones:

* Δ = mean(after) − mean(before), with a 95% bootstrap CI that resamples *prompts*
  (both arms together), :func:`core.stats.paired_bootstrap_ci`;
* the exact McNemar test: only discordant prompts carry information, and under the null
  each is equally likely to flip either way, so p = two-sided binomial test of
  ``b`` (1→0) among ``b + c`` (:func:`core.stats.mcnemar_p`);
* a placebo comparison: the real Δ against the Δs of R random neuron sets, as a
  percentile and an empirical p-value with the +1 correction, (1 + #{|Δ_placebo| ≥ |Δ|}) / (R + 1).

Example:
    >>> mcnemar_exact([1, 1, 0, 1], [0, 1, 1, 1]).p_value
    1.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.stats import Outcomes, discordant, mcnemar_p, paired, paired_bootstrap_ci


@dataclass(frozen=True)
class McNemar:
    b: int  # complied before, not after
    c: int  # complied after, not before
    p_value: float


@dataclass(frozen=True)
class PairedDelta:
    """Two rates on the same items: Δ = after − before with its 95% CI, and the exact McNemar p with the discordant
    counts it rests on. The one paired-difference record: the verdict rules read it as
    :class:`interventions.evidence.Difference`, lm-eval's comparison extends it
    (:class:`lmeval.compare.Paired`)."""

    n: int
    before: float
    after: float
    delta: float
    ci_low: float
    ci_high: float
    p_value: float  # exact McNemar
    lost: int = 0  # McNemar's b: 1 before, 0 after (0 where not counted)
    gained: int = 0  # c: 0 before, 1 after


# the keys of McNemar's counts in the report files, where a PairedDelta is written flat (core.records.flatten)
DISCORDANT_KEYS = {"lost": "discordant_lost", "gained": "discordant_gained"}


def mcnemar_exact(before: Outcomes, after: Outcomes) -> McNemar:
    """Exact (binomial) McNemar test on paired 0/1 outcomes."""
    b, c = discordant(*paired(before, after))
    return McNemar(b, c, float(mcnemar_p(b, c)))


def paired_delta(
    before: Outcomes, after: Outcomes, *, n_resamples: int = 10_000, seed: int = 0, with_ci: bool = True
) -> PairedDelta:
    """Compliance before/after, Δ with its 95% paired bootstrap CI, and the exact McNemar test.

    ``with_ci=False`` skips the bootstrap (CI reported as NaN), e.g. for placebo arms.
    """
    b, a = paired(before, after)
    n = int(b.size)
    if n == 0:
        nan = float("nan")
        return PairedDelta(0, nan, nan, nan, nan, nan, 1.0)
    low, high = (
        paired_bootstrap_ci(b, a, n_resamples=n_resamples, seed=seed) if with_ci else (float("nan"), float("nan"))
    )
    mc = mcnemar_exact(b, a)
    return PairedDelta(
        n, float(b.mean()), float(a.mean()), float(a.mean() - b.mean()), low, high, mc.p_value, mc.b, mc.c
    )


@dataclass(frozen=True)
class PlaceboComparison:
    real: float
    placebo: list[float]
    percentile: float  # % of placebo Δ below the real Δ (ties count half)
    p_empirical: float  # two-sided, +1 corrected


def placebo_compare(real: float, placebo: Sequence[float]) -> PlaceboComparison:
    """Place ``real`` in the placebo distribution.

    >>> placebo_compare(0.1, [0.0, 0.0, 0.2, -0.1]).p_empirical
    0.6
    """
    values = np.asarray([p for p in placebo if np.isfinite(p)], dtype=float)
    if values.size == 0 or not np.isfinite(real):
        return PlaceboComparison(float(real), [float(p) for p in placebo], float("nan"), float("nan"))
    below, ties = float(np.sum(values < real)), float(np.sum(values == real))
    percentile = 100.0 * (below + 0.5 * ties) / values.size
    extreme = int(np.sum(np.abs(values) >= abs(real) - 1e-12))
    p = (1 + extreme) / (values.size + 1)
    return PlaceboComparison(float(real), [float(p) for p in placebo], percentile, p)


def continuous_delta(
    before: Sequence[float] | np.ndarray,
    after: Sequence[float] | np.ndarray,
    *,
    ratio: bool = False,
    n_resamples: int = 10_000,
    seed: int = 0,
    with_ci: bool = True,
) -> PairedDelta:
    """A continuous outcome measured on the same rows before and after an edit, with a paired bootstrap 95% CI over
    rows (``p_value`` NaN: McNemar is for 0/1 outcomes). Rows where either value is not finite are left out.

    ``ratio=False``: Δ = mean(after) − mean(before). ``ratio=True`` (the gap closed): Δ = 1 − mean(after) /
    mean(before), a ratio of means resampled as one (``before`` the unedited KL, ``after`` the edited one); the
    record's ``before`` is then 0 and ``after`` is Δ.

    >>> d = continuous_delta([1.0, 2.0, 3.0], [0.5, 1.0, 1.5], ratio=True, n_resamples=200)
    >>> round(d.delta, 6), d.n, d.ci_low <= d.delta <= d.ci_high
    (0.5, 3, True)
    >>> continuous_delta([1.0, 2.0], [1.0, 2.0], ratio=True).delta   # nothing changed: exactly 0
    0.0
    """
    b, a = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    keep = np.isfinite(b) & np.isfinite(a)
    b, a = b[keep], a[keep]
    nan = float("nan")
    if b.size == 0 or (ratio and float(np.mean(b)) <= 0):
        return PairedDelta(int(b.size), nan, nan, nan, nan, nan, nan)

    def statistic(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        mean_x, mean_y = np.asarray(np.mean(x, axis=axis)), np.asarray(np.mean(y, axis=axis))
        result: np.ndarray = 1.0 - mean_y / mean_x if ratio else mean_y - mean_x
        return result

    delta = float(statistic(b, a))
    low, high = nan, nan
    if with_ci:
        if np.array_equal(b, a) or b.size == 1:
            low, high = delta, delta  # nothing varies between resamples
        else:
            from scipy import stats

            ci = stats.bootstrap(
                (b, a),
                statistic,
                paired=True,
                vectorized=True,
                confidence_level=0.95,
                n_resamples=n_resamples,
                method="percentile",
                rng=np.random.default_rng(seed),
            ).confidence_interval
            low, high = float(ci.low), float(ci.high)
    if ratio:
        return PairedDelta(int(b.size), 0.0, delta, delta, low, high, nan)
    return PairedDelta(int(b.size), float(np.mean(b)), float(np.mean(a)), delta, low, high, nan)
