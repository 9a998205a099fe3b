"""One capability × hook point's maps, per model and their difference, with their significance and window."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from einops import reduce

from analysis.window import Window


@dataclass
class MetricMaps:
    """All maps of one capability × hook; arrays are (n_layers, width), rows follow ``layers``."""

    capability: str
    hook: str
    metric: str
    layers: list[int]
    sft: np.ndarray
    dpo: np.ndarray
    delta: np.ndarray
    pvalues: np.ndarray
    qvalues: np.ndarray
    n_samples: int
    settings: dict[str, Any] = field(default_factory=dict)
    layer_rms: np.ndarray | None = None  # (2, n_layers): RMS activation per layer, rows sft and dpo
    window: Window | None = None  # which layers and why (None: computed for a bare list of layers)
    resampled_scores: np.ndarray | None = None  # (n_layers, n_resamples): each bootstrap resample's mean |Δ| per layer

    def loudness(self) -> np.ndarray | None:
        """(n_layers,) RMS activation per layer, the larger of the two models'; None without ``layer_rms``."""
        if self.layer_rms is None or self.layer_rms.size == 0:
            return None
        return reduce(self.layer_rms, "model layer -> layer", "max")

    def loudest_layer(self) -> int | None:
        """The layer of largest RMS activation (larger of the two models); None without ``layer_rms``."""
        loudness = self.loudness()
        return None if loudness is None else self.layers[int(loudness.argmax())]

    def quiet_layers(self, ratio: float = 0.01) -> list[int]:
        """Layers whose RMS activation (larger of the two models) is below ``ratio`` × the loudest layer's."""
        loudness = self.loudness()
        if loudness is None:
            return []
        return [layer for layer, rms in zip(self.layers, loudness, strict=True) if rms < ratio * loudness.max()]

    @property
    def width(self) -> int:
        return int(self.delta.shape[1])

    def significant(self, alpha: float) -> np.ndarray:
        """(n_layers, width) bool: BH-significant at level ``alpha``."""
        return self.qvalues <= alpha
