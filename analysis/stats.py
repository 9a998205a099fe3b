"""Paired per-unit tests between the two models, and Benjamini–Hochberg across layers × units.

Both models see the same prompts, so every test is *paired* on the prompt:

- ``mean_diff`` / ``effect_size``: per unit, the differences ``d = dpo - sft`` over the
  N prompts; Student's paired t-test (``scipy.stats.ttest_rel``) or Wilcoxon's
  signed-rank test (``scipy.stats.wilcoxon``); the standardised effect is Cohen's
  ``d_z = mean(d) / sd(d)``.
- ``topk_count``: per unit, membership in the top k% is a 0/1 outcome per prompt and
  model. Only discordant prompts carry information: ``n01`` (in DPO's top k%, not
  SFT's) and ``n10`` (the reverse); ``count_dpo - count_sft = n01 - n10``. The exact
  McNemar test is the two-sided binomial test of ``n01`` out of ``n01 + n10`` at 1/2
  (:func:`core.stats.mcnemar_p`, the one every stage uses).

A unit whose test cannot be computed (no variance, no discordant prompts, fewer than
two prompts) gets p = 1: no evidence, never a spurious discovery.

Example:
    >>> bh_qvalues(np.array([0.01, 0.04, 0.03])).round(3).tolist()
    [0.03, 0.04, 0.04]
"""

from __future__ import annotations

import warnings

import numpy as np
from einops import pack, reduce, unpack
from scipy import stats


def paired_pvalues(sft: np.ndarray, dpo: np.ndarray, test: str = "t") -> np.ndarray:
    """(N, W) and (N, W) paired samples -> (W,) two-sided p-values of ``dpo - sft``."""
    if sft.shape[0] < 2:
        return np.ones(sft.shape[1:], dtype=np.float64)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if test == "t":
            p = stats.ttest_rel(dpo, sft, axis=0).pvalue
        elif test == "wilcoxon":
            diff = np.asarray(dpo, dtype=np.float64) - np.asarray(sft, dtype=np.float64)
            p = np.ones(diff.shape[1], dtype=np.float64)
            varying = reduce(diff != 0, "n unit -> unit", "any")
            if varying.any():
                p[varying] = stats.wilcoxon(diff[:, varying], axis=0, zero_method="wilcox").pvalue
        else:
            raise ValueError(f"unknown test {test!r}")
    return np.nan_to_num(np.asarray(p, dtype=np.float64), nan=1.0)


def effect_size_dz(sft: np.ndarray, dpo: np.ndarray) -> np.ndarray:
    """(N, W) pairs -> (W,) Cohen's d_z = mean(d) / sd(d, ddof=1); 0 where sd is 0 or N < 2."""
    return dz_of_differences(np.asarray(dpo, dtype=np.float64) - np.asarray(sft, dtype=np.float64))


def dz_of_differences(diff: np.ndarray) -> np.ndarray:
    """(N, W) paired differences (float64) -> (W,) d_z; what :func:`effect_size_dz` computes after the subtraction.

    >>> dz_of_differences(np.array([[1.0, 2.0], [3.0, 2.0]])).tolist()
    [1.414213562373095, 0.0]
    """
    if diff.shape[0] < 2:
        return np.zeros(diff.shape[1:], dtype=np.float64)
    mean = reduce(diff, "n ... -> ...", "mean")
    sd = reduce(diff, "n ... -> ...", sample_sd)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sd > 0, mean / np.where(sd > 0, sd, 1.0), 0.0)


def bh_qvalues(pvalues: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values over *all* entries (layers × units), same shape.

    >>> bh_qvalues(np.array([[0.01, 0.04], [0.03, 0.5]])).round(3).tolist()
    [[0.04, 0.053], [0.053, 0.5]]
    """
    flat, shapes = pack([np.asarray(pvalues, dtype=np.float64)], "*")
    if flat.size == 0:
        return np.asarray(pvalues, dtype=np.float64)
    return unpack(np.asarray(stats.false_discovery_control(flat, method="bh")), shapes, "*")[0]


def sample_sd(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """The sample standard deviation (ddof=1) over ``axes``: an einops reduction, ``reduce(x, "n w -> w", sample_sd)``.

    >>> reduce(np.array([[1.0, 2.0], [3.0, 2.0]]), "n w -> w", sample_sd).tolist()
    [1.4142135623730951, 0.0]
    """
    return np.asarray(x.std(axis=axes, ddof=1))
