"""What DPO changed against what SFT had already changed: SFT − base beside DPO − SFT.

A run recorded with ``--base`` holds a third model, the one the SFT started from. For each
capability × hook the analysis then also computes the SFT − base map (same metric, window
and tests as the DPO − SFT map, :func:`analysis.maps.compute_maps` with
``models=("base", "sft")``) and compares the two:

* **overlap of their top units**: the ``k`` units of largest |Δ| in each map (the neuron-set
  rule, :func:`analysis.profile.ranked_units`) and their Jaccard index, against a *matched*
  random baseline: two random sets with the same number of units in each layer as the real
  ones. Top units crowd into a few loud layers, so two unrelated top sets overlap more than two
  uniform random sets would; matching the per-layer counts removes that. Per layer, the
  intersection of two random subsets of sizes a and b out of W units is hypergeometric, so the
  baseline is drawn exactly and cheaply (``n_draws`` draws, fixed seed);
* **per-layer correlation**: Pearson's r over the units of each layer between the two Δ maps
  (None for a layer where either map is constant).

Example:
    >>> c = compare_maps(sft_minus_base, dpo_minus_sft, k=64)                 # doctest: +SKIP
    >>> c.describe()                                                          # doctest: +SKIP
    'SFT−base vs DPO−SFT, top 64 units: Jaccard 0.11 (matched random 0.02, 95th percentile 0.04; ...'
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from einops import reduce

from analysis.metric_maps import MetricMaps
from analysis.profile import ranked_units

N_DRAWS = 2000


@dataclass(frozen=True)
class BaseComparison:
    """The comparison of one capability × hook (``base`` in ``summary.json``)."""

    k: int
    jaccard: float
    random_jaccard: float  # mean of the matched random baseline
    random_p95: float
    share_random_at_least: float  # share of random draws whose Jaccard is >= the observed one (a one-sided p-value)
    n_draws: int
    seed: int
    layer_correlation: dict[int, float | None]
    mean_correlation: float | None
    sft_minus_base_top_layers: list[int]
    sft_minus_base_maps: str = ""

    def describe(self) -> str:
        r = "n/a" if self.mean_correlation is None else f"{self.mean_correlation:+.2f}"
        return (
            f"SFT−base vs DPO−SFT, top {self.k} units: Jaccard {self.jaccard:.3f} (matched random "
            f"{self.random_jaccard:.3f}, 95th percentile {self.random_p95:.3f}; "
            f"{self.share_random_at_least:.1%} of {self.n_draws} draws reach it); per-layer correlation of Δ, "
            f"mean r {r}; SFT−base top layers {', '.join(str(i) for i in self.sft_minus_base_top_layers[:5])}"
        )


def top_set(maps: MetricMaps, k: int) -> np.ndarray:
    """(n, 2) rows of (layer row, unit): the ``k`` units of largest |Δ| (Δ = 0 never counts),
    ties by layer then unit."""
    return ranked_units(maps, np.abs(maps.delta) > 0)[:k]


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard index of two (n, 2) unit lists; 0 for two empty sets."""
    first, second = {tuple(x) for x in a.tolist()}, {tuple(x) for x in b.tolist()}
    union = len(first | second)
    return len(first & second) / union if union else 0.0


def matched_random_jaccard(
    counts_a: np.ndarray, counts_b: np.ndarray, width: int, n_draws: int = N_DRAWS, seed: int = 0
) -> np.ndarray:
    """(n_draws,) Jaccard of two random unit sets with ``counts_a`` / ``counts_b`` units in each layer (of ``width``).

    >>> draws = matched_random_jaccard(np.array([4, 0]), np.array([4, 0]), width=4, n_draws=3)
    >>> draws.tolist()
    [1.0, 1.0, 1.0]
    """
    rng = np.random.default_rng(seed)
    counts_a, counts_b = np.asarray(counts_a, dtype=np.int64), np.asarray(counts_b, dtype=np.int64)
    per_layer = rng.hypergeometric(counts_a, width - counts_a, counts_b, size=(n_draws, len(counts_a)))
    shared = reduce(per_layer, "draw layer -> draw", "sum")
    union = counts_a.sum() + counts_b.sum() - shared
    return np.where(union > 0, shared / np.maximum(union, 1), 0.0)


def layer_correlations(first: np.ndarray, second: np.ndarray, layers: list[int]) -> dict[int, float | None]:
    """Pearson r over units, per layer, between two (n_layers, width) maps; None where either is constant."""
    out: dict[int, float | None] = {}
    for row, layer in enumerate(layers):
        x, y = first[row].astype(np.float64), second[row].astype(np.float64)
        out[layer] = None if x.std() == 0 or y.std() == 0 else float(np.corrcoef(x, y)[0, 1])
    return out


def compare_maps(
    sft_minus_base: MetricMaps, dpo_minus_sft: MetricMaps, k: int, n_draws: int = N_DRAWS, seed: int = 0
) -> BaseComparison:
    """The overlap of the two maps' top-``k`` units against the matched baseline, and their per-layer correlation."""
    from analysis.profile import layer_scores, rank_layers

    if sft_minus_base.layers != dpo_minus_sft.layers or sft_minus_base.delta.shape != dpo_minus_sft.delta.shape:
        raise ValueError("the two maps must cover the same layers and units")
    top_a, top_b = top_set(sft_minus_base, k), top_set(dpo_minus_sft, k)
    n_rows = len(dpo_minus_sft.layers)
    counts_a = np.bincount(top_a[:, 0], minlength=n_rows) if len(top_a) else np.zeros(n_rows, dtype=np.int64)
    counts_b = np.bincount(top_b[:, 0], minlength=n_rows) if len(top_b) else np.zeros(n_rows, dtype=np.int64)
    observed = jaccard(top_a, top_b)
    draws = matched_random_jaccard(counts_a, counts_b, dpo_minus_sft.width, n_draws, seed)
    correlations = layer_correlations(sft_minus_base.delta, dpo_minus_sft.delta, dpo_minus_sft.layers)
    known = [r for r in correlations.values() if r is not None]
    return BaseComparison(
        k=k,
        jaccard=observed,
        random_jaccard=float(draws.mean()),
        random_p95=float(np.quantile(draws, 0.95)),
        share_random_at_least=float((draws >= observed - 1e-12).mean()),
        n_draws=n_draws,
        seed=seed,
        layer_correlation=correlations,
        mean_correlation=float(np.mean(known)) if known else None,
        sft_minus_base_top_layers=rank_layers(layer_scores(sft_minus_base.delta), sft_minus_base.layers),
    )
