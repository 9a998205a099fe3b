"""Do the units whose activations moved also have weights that moved? Two rankings compared, with their chance level.

The activation map ranks units by |Δ| over prompts; the weight-change map
(:mod:`analysis.weight_change`) ranks them by how much their own weights changed, with no
prompt at all. Per layer of the analysis window, :func:`layer_agreement` gives Spearman's ρ
between the two over the layer's units (``scipy.stats.spearmanr``; ties get average ranks)
with a two-sided permutation p-value: the weight-change ranks are shuffled across the
layer's units ``n_permutations`` times (seeded) and p = (1 + #{|ρ_perm| ≥ |ρ|}) / (R + 1);
q-values are Benjamini–Hochberg across the window's layers. :func:`top_overlap` compares the
two top-K sets over the whole window against the hypergeometric chance level.

Both are reported whatever they show: a low ρ says the activation change of those units
comes mostly through their inputs (earlier layers, attention), not from their own weights.

Example:
    >>> rows = layer_agreement(np.array([[1.0, 2.0, 3.0, 4.0]]), np.array([[0.1, 0.2, 0.3, 0.4]]), [7], 99, seed=0)
    >>> rows[0].layer, rows[0].spearman, rows[0].n_units
    (7, 1.0, 4)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from analysis.stats import bh_qvalues


@dataclass(frozen=True)
class LayerAgreement:
    """Spearman's ρ of one layer (None when either ranking is constant there), its permutation p and BH q."""

    layer: int
    spearman: float | None
    p_permutation: float
    q: float
    n_units: int


@dataclass(frozen=True)
class TopOverlap:
    """How many of the ``k`` units first by |Δ| are also among the ``k`` first by weight change,
    and how many chance gives."""

    k: int
    n_units: int
    overlap: int
    expected: float
    p_hypergeometric: float  # P(overlap at least this large by chance)
    units: list[list[int]]  # [layer, unit] of the shared units, in activation-rank order


def layer_agreement(
    activation: np.ndarray, weights: np.ndarray, layers: list[int], n_permutations: int = 1000, seed: int = 0
) -> list[LayerAgreement]:
    """Per row (layer) of two (layers, units) maps: ρ between |activation| and ``weights``, permutation p, BH q."""
    rng = np.random.default_rng(seed)
    found = [_one_layer(np.abs(a), w, n_permutations, rng) for a, w in zip(activation, weights, strict=True)]
    q = bh_qvalues(np.array([p for _, p in found])) if found else np.zeros(0)
    return [
        LayerAgreement(layer, rho, p, float(qi), int(activation.shape[1]))
        for layer, (rho, p), qi in zip(layers, found, q, strict=True)
    ]


def _one_layer(
    x: np.ndarray, y: np.ndarray, n_permutations: int, rng: np.random.Generator, chunk: int = 256
) -> tuple[float | None, float]:
    """Spearman's ρ of x and y and its two-sided permutation p-value (Pearson's r of average ranks, shuffled)."""
    finite = np.isfinite(x) & np.isfinite(y)
    x, y = x[finite], y[finite]
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None, 1.0
    rho = float(stats.spearmanr(x, y).statistic)
    rx = stats.rankdata(x) - (x.size + 1) / 2
    ry = stats.rankdata(y) - (y.size + 1) / 2
    scale = float(np.sqrt((rx @ rx) * (ry @ ry)))
    beyond, done = 0, 0
    while done < n_permutations:
        block = rng.permuted(np.broadcast_to(ry, (min(chunk, n_permutations - done), ry.size)), axis=1)
        beyond += int(np.sum(np.abs(block @ rx) / scale >= abs(rho) - 1e-12))
        done += block.shape[0]
    return rho, (1 + beyond) / (n_permutations + 1)


def top_overlap(activation: np.ndarray, weights: np.ndarray, layers: list[int], k: int) -> TopOverlap:
    """The top-``k`` units of the window by |activation Δ| (nonzero only) and by weight change, compared."""
    by_delta = top_positive(np.abs(activation), k)
    by_weight = top_positive(np.where(np.isfinite(weights), weights, np.finfo(np.float64).max), k)
    in_weight = set(by_weight)
    shared = [pair for pair in by_delta if pair in in_weight]
    n_units = int(activation.size)
    k_a, k_w = len(by_delta), len(by_weight)
    return TopOverlap(
        k=k,
        n_units=n_units,
        overlap=len(shared),
        expected=k_a * k_w / n_units if n_units else 0.0,
        p_hypergeometric=float(stats.hypergeom.sf(len(shared) - 1, n_units, k_w, k_a)),
        units=[[layers[row], unit] for row, unit in shared],
    )


def top_positive(values: np.ndarray, k: int) -> list[tuple[int, int]]:
    """(row, unit) of the ``k`` largest positive values, largest first, ties by row then unit."""
    rows, units = np.nonzero(values > 0)
    order = np.lexsort((units, rows, -values[rows, units]))[:k]
    return [(int(rows[i]), int(units[i])) for i in order]
