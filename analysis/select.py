"""From a map to a neuron set: the units an intervention should act on.

Two rules, both within the analysed layer window:

``top_k_abs``
    The ``k`` units of largest |Δ| (ties by layer, then unit) — the paper's choice of
    "most changed" units. Units with Δ = 0 are never selected, and ``threshold``
    (a minimum |Δ|) applies if given.
``fdr``
    The units that survive Benjamini–Hochberg at ``alpha`` *and* have |Δ| ≥
    ``threshold``, ranked the same way; at most ``k`` of them (``k=None``: all).

The result is an :class:`access.units.NeuronSet` carrying the metric,
capability, hook, the rule and its parameters, the run directory and the model hashes.

Example:
    >>> d = np.array([[0.5, -2.0, 0.1], [0.0, 0.3, -0.4]])   # DPO − SFT at layers 12 and 13, 3 units each
    >>> sft, p = np.zeros_like(d), np.full_like(d, 0.5)
    >>> maps = MetricMaps("multi_turn", "mlp_out", "mean_diff", [12, 13], sft, d, d, p, p, n_samples=40)
    >>> [(n.layer, n.unit) for n in select_neurons(maps, rule="top_k_abs", k=3).neurons]   # largest |Δ| first
    [(12, 1), (12, 0), (13, 2)]
    >>> ns = select_neurons(maps, rule="top_k_abs", k=64)                 # doctest: +SKIP
    >>> ns.save(RunDir(run_dir).analysis.neuron_set("multi_turn", "mlp_out"))  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np

from access.units import Neuron, NeuronSet
from analysis.config import RULES
from analysis.metric_maps import MetricMaps
from analysis.profile import ranked_units
from analysis.window import format_layers
from core.errors import ProbeError


def select_neurons(
    maps: MetricMaps,
    rule: str = "top_k_abs",
    k: int | None = 64,
    threshold: float = 0.0,
    alpha: float = 0.05,
    run_dir: str = "",
    model_hashes: dict[str, str] | None = None,
) -> NeuronSet:
    """Select units from ``maps`` by ``rule``; may be empty when nothing qualifies (check ``len``)."""
    if rule not in RULES:
        raise ProbeError(f"--rule {rule!r}: expected one of {', '.join(RULES)}")
    if k is not None and k < 1:
        raise ProbeError(f"--top-k {k}: expected a positive integer")
    if rule == "top_k_abs" and k is None:
        raise ProbeError("--rule top_k_abs needs --top-k")
    magnitude = np.abs(maps.delta)
    mask = (magnitude > 0) & (magnitude >= threshold)
    if rule == "fdr":
        mask &= maps.significant(alpha)
    ranked = ranked_units(maps, mask)
    chosen = ranked if k is None else ranked[:k]
    neurons = [Neuron(maps.layers[row], int(unit), float(maps.delta[row, unit])) for row, unit in chosen]
    metric_settings = dict(maps.settings)
    if "k" in metric_settings:  # topk_count's units kept per sample, not the selection's k
        metric_settings["kept_per_sample"] = metric_settings.pop("k")
    selection: dict[str, Any] = {
        **metric_settings,
        "rule": rule,
        "k": k,
        "threshold": threshold,
        "layers": [maps.layers[0], maps.layers[-1]],
        "window": format_layers(maps.layers),
        "n_candidates": len(ranked),
        "n_samples": maps.n_samples,
    }
    if rule == "fdr":
        selection["alpha"] = alpha
    return NeuronSet(neurons, maps.hook, maps.metric, maps.capability, selection, run_dir, dict(model_hashes or {}))
