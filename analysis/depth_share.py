"""How much of the SFT/DPO discrepancy lies in the depth-scaled window, against a uniform spread, with a bootstrap CI.

The paper reports the difference concentrated in layers 12-31 of 32. Its testable form: of the
summed per-layer discrepancy over *every* layer (per layer the analysis's ranking score, mean
|Δ| over the layer's units, :func:`analysis.profile.layer_scores`), the share that falls in the
window (:func:`analysis.window.default_window`, the paper's 12-31 scaled by depth) should exceed
the window's share of the layers, the share a uniform spread would give. The interval is a 95%
percentile bootstrap over the prompts (:data:`N_RESAMPLES` draws, seed :data:`SEED`): each draw
recomputes every layer's Δ exactly as the analysis does (same metric, top-k percent and
normalisation; :func:`analysis.maps.compute_maps`), so the interval is that of the share itself.

It needs layers outside the window: a recording of the window alone (``probe run --layers``)
cannot form the share, and :func:`depth_share` returns ``None`` with the reason.

Example:
    >>> share = depth_share("runs/latest", "multi_turn", "mlp_out")           # doctest: +SKIP
    >>> share.share, share.uniform, (share.ci_low, share.ci_high)             # doctest: +SKIP
    (0.71, 0.633, (0.69, 0.73))
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from analysis.config import AnalysisConfig
from analysis.maps import compute_maps
from analysis.profile import layer_scores
from analysis.window import default_window, format_layers, model_depth
from probes.store import RunReader

N_RESAMPLES = 200
SEED = 0


@dataclass(frozen=True)
class DepthShareResult:
    """The window's share of the per-layer discrepancy for one capability × hook (module doc)."""

    capability: str
    hook: str
    metric: str
    n_samples: int
    layers: list[int]  # every recorded layer, in order
    scores: list[float]  # per layer of ``layers``: mean |Δ|
    window: list[int]  # the depth-scaled window (recorded layers of it)
    n_model_layers: int
    share: float
    ci_low: float
    ci_high: float
    uniform: float
    n_resamples: int = N_RESAMPLES
    settings: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return (
            f"{self.capability}/{self.hook}: layers {format_layers(self.window)} hold {self.share:.1%} of the summed "
            f"mean |Δ| [95% CI {self.ci_low:.1%}, {self.ci_high:.1%}] against {self.uniform:.1%} under a uniform spread"
        )


def untestable_reason(stored: list[int], n_model_layers: int) -> str | None:
    """Why the share cannot be formed from these recorded layers (None: it can).

    >>> print(untestable_reason(list(range(12, 32)), 32))
    the recording holds layers 12-31 only, all inside the window 12-31: a share of the whole depth needs the layers
    outside it (record without --layers)
    >>> untestable_reason(list(range(32)), 32) is None
    True
    """
    window = [i for i in default_window(n_model_layers) if i in stored]
    outside = [i for i in stored if i not in window]
    if not window:
        return f"the recording holds none of the window {format_layers(default_window(n_model_layers))}"
    if not outside:
        return (
            f"the recording holds layers {format_layers(stored)} only, all inside the window "
            f"{format_layers(default_window(n_model_layers))}: a share of the whole depth needs the layers outside it "
            "(record without --layers)"
        )
    return None


def depth_share(
    run_dir: str | Path,
    capability: str,
    hook: str,
    config: AnalysisConfig | None = None,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> DepthShareResult | str:
    """The share for one capability × hook, or the reason it cannot be formed (a string).

    ``config``: the analysis's metric, top-k percent and normalisation (its window and bootstrap settings are
    replaced: the window is always the depth-scaled one, the bootstrap this module's).
    """
    base = config or AnalysisConfig()
    config = replace(base, layers=None, stability_resamples=n_resamples, stability_seed=seed)
    with RunReader(run_dir) as run:
        stored = run.layers(capability, hook)
        n_model = model_depth(run, stored)
        why = untestable_reason(stored, n_model)
        if why:
            return why
        maps = compute_maps(run, capability, hook, stored, config)
    scores = layer_scores(maps.delta)
    assert maps.resampled_scores is not None
    in_window = np.isin(np.asarray(stored), default_window(n_model))
    share = _share(scores, in_window)
    draws = np.array([_share(maps.resampled_scores[:, b], in_window) for b in range(maps.resampled_scores.shape[1])])
    draws = draws[np.isfinite(draws)]
    low, high = (
        (float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))) if draws.size else (float("nan"),) * 2
    )
    return DepthShareResult(
        capability=capability,
        hook=hook,
        metric=config.metric,
        n_samples=maps.n_samples,
        layers=list(stored),
        scores=[float(s) for s in scores],
        window=[i for i, w in zip(stored, in_window, strict=True) if w],
        n_model_layers=n_model,
        share=share,
        ci_low=low,
        ci_high=high,
        uniform=float(in_window.mean()),
        n_resamples=n_resamples,
        settings={
            "metric": config.metric,
            "top_percent": config.top_percent,
            "normalize": config.normalize,
            "test": config.test,
            "seed": seed,
        },
    )


def _share(scores: np.ndarray, in_window: np.ndarray) -> float:
    total = float(np.sum(scores))
    return float(np.sum(scores[in_window]) / total) if total > 0 else float("nan")
