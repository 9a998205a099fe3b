"""How stable the layer ranking is: a bootstrap over the prompts, recorded with every analysis.

The top discrepancy layers are read off N prompts; another draw of prompts could rank
them differently. ``n_resamples`` times (default 20, fixed seed), a capability's N
prompts are drawn N times with replacement, Δ is recomputed on the resample exactly as
on the real prompts (same metric, window and normalisation: :func:`analysis.maps.compute_maps`
does it layer by layer while the activations are in memory) and the layers are ranked
by the same rule (:func:`analysis.profile.layer_scores`, :func:`analysis.profile.rank_layers`).
The record (:class:`LayerStability`) says, for the real top k = 5 layers, in how many
resamples the resample's top 5 keeps at least 4 of them (target: 18 of 20; reported,
never enforced), how often each layer was in a resample's top 5, and the mean overlap.

A resample is a weight per prompt (how many times it was drawn), so for ``topk_count``
it is a weighted count of the per-prompt top-k membership the map was built from (one
(B, N) × (N, W) product per layer), for ``mean_diff`` a weighted mean, and for
``effect_size`` d_z of the drawn differences.

Example:
    >>> scores = np.array([[5.0, 5.1, 1.0], [1.0, 1.2, 6.0], [3.0, 2.0, 3.5]])   # 3 layers x 3 resamples
    >>> s = layer_stability([10, 11, 12], np.array([5.0, 1.0, 3.0]), scores, seed=0, k=2)
    >>> s.top_layers, s.kept_at_least, s.resamples_meeting, s.mean_overlap, s.layer_frequency
    ([10, 12], 1, 3, 1.6666666666666667, {12: 3, 10: 2, 11: 1})
    >>> s.describe()
    'top layers 10, 12 — stable in 3/3 resamples (≥1 of 2 kept)'
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
from einops import rearrange

from analysis.profile import rank_layers
from analysis.stats import dz_of_differences

TOP_K = 5
TARGET_SHARE = 0.9  # 18 of 20 resamples


@dataclass(frozen=True)
class Resamples:
    """B bootstrap draws of N prompts: ``indices`` (B, N) and ``weights`` (B, N), how often each prompt was drawn.

    >>> r = Resamples.draw(n_samples=4, n_resamples=2, seed=0)
    >>> r.weights.sum(axis=1).tolist(), r.weights.shape
    ([4.0, 4.0], (2, 4))
    """

    indices: np.ndarray
    weights: np.ndarray

    @classmethod
    def draw(cls, n_samples: int, n_resamples: int, seed: int) -> Resamples:
        """``n_resamples`` draws of ``n_samples`` prompts with replacement, from ``numpy.random.default_rng(seed)``."""
        indices = np.random.default_rng(seed).integers(0, n_samples, size=(n_resamples, n_samples))
        offsets = rearrange(np.arange(n_resamples), "draw -> draw 1") * n_samples
        counts = np.bincount(rearrange(indices + offsets, "draw n -> (draw n)"), minlength=n_resamples * n_samples)
        weights = rearrange(counts, "(draw n) -> draw n", draw=n_resamples, n=n_samples)
        return cls(indices, weights.astype(np.float32))

    @property
    def n_resamples(self) -> int:
        return int(self.indices.shape[0])

    def count_differences(self, in_sft: np.ndarray, in_dpo: np.ndarray) -> np.ndarray:
        """(N, W) top-k membership per model -> (B, W) float64 count_dpo - count_sft per resample (exact integers)."""
        moved = in_dpo.astype(np.float32)
        moved -= in_sft
        return (self.weights @ moved).astype(np.float64)

    def mean_differences(self, diff: np.ndarray) -> np.ndarray:
        """(N, W) paired differences -> (B, W) their mean on each resample."""
        return np.asarray((self.weights.astype(np.float64) @ diff) / diff.shape[0])

    def effect_sizes(self, diff: np.ndarray) -> np.ndarray:
        """(N, W) paired differences -> (B, W) d_z on each resample (:func:`analysis.stats.dz_of_differences`)."""
        return (
            np.stack([dz_of_differences(diff[rows]) for rows in self.indices])
            if self.n_resamples
            else np.zeros((0, diff.shape[1]))
        )


@dataclass(frozen=True)
class LayerStability:
    """The bootstrap figure of one capability × hook (``stability`` in ``summary.json``).

    ``layer_frequency``: layer -> resamples in which it was in the top ``k`` (layers that
    ever were, most frequent first, ties by layer).
    """

    n_resamples: int
    seed: int
    k: int
    top_layers: list[int]
    kept_at_least: int
    resamples_meeting: int
    mean_overlap: float
    layer_frequency: dict[int, int]

    def verdict(self) -> str:
        """'stable in 19/20 resamples (≥4 of 5 kept)', flagged when below the 90% target."""
        text = (
            f"stable in {self.resamples_meeting}/{self.n_resamples} resamples (≥{self.kept_at_least} of {self.k} kept)"
        )
        target = math.ceil(TARGET_SHARE * self.n_resamples)
        return (
            text
            if self.resamples_meeting >= target
            else f"{text}: unstable, below the {target}/{self.n_resamples} target"
        )

    def describe(self) -> str:
        """One line: the real top layers, then the verdict."""
        return f"top layers {', '.join(str(i) for i in self.top_layers)} — {self.verdict()}"


def layer_stability(
    layers: list[int], scores: np.ndarray, resampled: np.ndarray, seed: int, k: int = TOP_K
) -> LayerStability:
    """Compare the real top-``k`` layers (``scores``, (L,)) with each resample's (``resampled``, (L, B));
    see the module doc."""
    top = rank_layers(scores, layers)[:k]
    k = len(top)
    resample_tops = [rank_layers(resampled[:, b], layers)[:k] for b in range(resampled.shape[1])]
    overlaps = [len(set(top) & set(other)) for other in resample_tops]
    kept = max(1, k - 1)
    frequency = Counter(layer for other in resample_tops for layer in other)
    return LayerStability(
        n_resamples=len(resample_tops),
        seed=seed,
        k=k,
        top_layers=top,
        kept_at_least=kept,
        resamples_meeting=sum(o >= kept for o in overlaps),
        mean_overlap=float(np.mean(overlaps)) if overlaps else float("nan"),
        layer_frequency=dict(sorted(frequency.items(), key=lambda item: (-item[1], item[0]))),
    )
