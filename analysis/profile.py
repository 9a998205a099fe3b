"""Rankings read off a map: which layers differ most, and which units.

The per-layer profile is what the paper's "layers 12–31, layer 19 most" claim rests
on, so it carries the size of the difference (mean |Δ| over the layer's units), the
evidence for it (share of units that survive Benjamini–Hochberg) and the layer's
activation scale (RMS per model), without which a rank-based Δ in a near-silent layer
looks as important as one in a layer that drives the output. Layers are
ranked by mean |Δ|, ties by layer index; units by |Δ|, ties by layer then unit, so
rankings are deterministic.

Both rankings are typed rows (:class:`RankedLayer`, :class:`RankedUnit`), stored in
``summary.json`` as ``top_layers`` and ``top_units`` by :mod:`core.records`.

Example:
    >>> top = layer_profile(maps, alpha=0.05)[0]                                  # doctest: +SKIP
    >>> top.rank, top.layer, top.mean_abs_delta, top.share_significant, top.rms_dpo   # doctest: +SKIP
    (1, 19, 0.031, 0.12, 0.43)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from einops import rearrange, reduce

from core.records import OMIT_NONE

if TYPE_CHECKING:
    from analysis.metric_maps import MetricMaps


@dataclass(frozen=True)
class RankedLayer:
    """One layer of the profile: its rank by mean |Δ|, the share and count of units significant at the FDR level,
    and its RMS activation per model (None for maps that carry no activation scale)."""

    rank: int
    layer: int
    mean_abs_delta: float
    share_significant: float
    n_significant: int
    rms_sft: float | None = field(default=None, metadata=OMIT_NONE)
    rms_dpo: float | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class RankedUnit:
    """One unit of the top list: its layer and index, Δ, the per-model values Δ is taken between, p and q."""

    layer: int
    unit: int
    delta: float
    sft: float
    dpo: float
    p: float
    q: float


def layer_scores(delta: np.ndarray) -> np.ndarray:
    """What layers are ranked by: mean |Δ| over the units (the last axis), for a (layers, units) map or (…, units) rows.

    >>> layer_scores(np.array([[0.5, -0.5], [0.0, 0.25]])).tolist()
    [0.5, 0.125]
    """
    return np.asarray(reduce(np.abs(delta), "... unit -> ...", "mean"))


def rank_layers(scores: np.ndarray, layers: list[int]) -> list[int]:
    """Layers ordered by score, descending, ties by layer index: the one ranking rule (profile, tables, bootstrap).

    >>> rank_layers(np.array([0.1, 0.3, 0.3]), [12, 13, 14])
    [13, 14, 12]
    """
    order = np.lexsort((np.asarray(layers), -np.asarray(scores, dtype=np.float64)))
    return [layers[i] for i in order]


def layer_profile(maps: MetricMaps, alpha: float) -> list[RankedLayer]:
    """One row per layer in the map, ranked by mean |Δ| (:func:`layer_scores`, :func:`rank_layers`)."""
    mean_abs = layer_scores(maps.delta)
    significant = maps.significant(alpha)
    row_of = {layer: i for i, layer in enumerate(maps.layers)}
    return [
        RankedLayer(
            rank=rank,
            layer=layer,
            mean_abs_delta=float(mean_abs[row_of[layer]]),
            share_significant=float(significant[row_of[layer]].mean()),
            n_significant=int(significant[row_of[layer]].sum()),
            **_scale(maps, row_of[layer]),
        )
        for rank, layer in enumerate(rank_layers(mean_abs, maps.layers), start=1)
    ]


def _scale(maps: MetricMaps, row: int) -> dict[str, float]:
    if maps.layer_rms is None:
        return {}
    return {"rms_sft": float(maps.layer_rms[0, row]), "rms_dpo": float(maps.layer_rms[1, row])}


def ranked_units(maps: MetricMaps, mask: np.ndarray | None = None) -> np.ndarray:
    """(M, 2) array of (row, unit) sorted by |Δ| descending, then layer, then unit; optionally only where ``mask``."""
    rows, units = np.nonzero(np.ones_like(maps.delta, dtype=bool) if mask is None else mask)
    magnitude = np.abs(maps.delta[rows, units])
    order = np.lexsort((units, rows, -magnitude))
    return rearrange([rows[order], units[order]], "pair m -> m pair")


def top_units(maps: MetricMaps, n: int) -> list[RankedUnit]:
    """The ``n`` units of largest |Δ| with their per-model values, p and q."""
    return [
        RankedUnit(
            layer=maps.layers[row],
            unit=int(unit),
            delta=float(maps.delta[row, unit]),
            sft=float(maps.sft[row, unit]),
            dpo=float(maps.dpo[row, unit]),
            p=float(maps.pvalues[row, unit]),
            q=float(maps.qvalues[row, unit]),
        )
        for row, unit in _top_pairs(maps, n)
    ]


def _top_pairs(maps: MetricMaps, n: int) -> np.ndarray:
    """Top ``n`` (row, unit) pairs without sorting the whole map when it is large."""
    flat = rearrange(np.abs(maps.delta), "layer unit -> (layer unit)")
    n = min(n, flat.size)
    if n == 0:
        return np.zeros((0, 2), dtype=np.int64)
    cutoff = np.partition(flat, flat.size - n)[flat.size - n]
    return ranked_units(maps, np.abs(maps.delta) >= cutoff)[:n]


def unit_order(maps: MetricMaps) -> np.ndarray:
    """(width,) unit indices sorted by summed |Δ| over the window, largest first (the intent of ``lin_heat_map``)."""
    total = reduce(np.abs(maps.delta), "layer unit -> unit", "sum")
    return np.lexsort((np.arange(total.size), -total))
