"""Analysis: SFT-vs-DPO discrepancy maps, layer profiles, neuron sets and plots.

``from analysis import analyze_run`` is the entry point (see :mod:`analysis.run`).
Exports are resolved lazily so that ``import access.units`` (what
interventions need) does not pull in plotly, scipy and h5py.

Modules:
    config, run                 ``AnalysisConfig``; ``analyze_run``, from a run directory to every output below
    rankings                    the rankings, one row each: what it scores, its bases, how it is computed, what first
    maps, metric_maps           the maps of a ranking per capability × hook (the activation rankings' kernels); the type
    attribution_maps            the ``attribution`` ranking's maps, from its gradient pass
    topk, stats                 the paper's top-k% membership counts; paired per-unit tests and Benjamini–Hochberg
    window, basis, local_basis  which layers, and why; the global and the local basis; both side by side
    profile, stability          layer and unit rankings read off a map; how stable the layer ranking is (a bootstrap)
    select, summary             a map's neuron set; ``summary.json`` as a typed record
    base_compare, depth_share   SFT − base beside DPO − SFT; how much of the discrepancy lies in the window
    recall                      recall of a planted pair's known units, per ranking
    plots, explore              plotly figures; the heatmap notebook's tables and drill-down
    explain, explain_config     ``probe explain``: what the changed units do, and its settings
    explain_models, checkpoint  the checkpoints an explanation reads, tensor by tensor
    weight_change, agreement    per-unit weight change between two checkpoints; does it agree with the activations'
    readout                     what a unit writes into the predictions, through the final norm and the unembedding
    explain_record, explain_html  the explanation as a typed record, and its page of neuron cards
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analysis.config import AnalysisConfig
    from analysis.maps import compute_maps, load_maps
    from analysis.metric_maps import MetricMaps
    from analysis.run import AnalysisResult, analyze_run
    from analysis.select import select_neurons

__all__ = [
    "AnalysisConfig",
    "AnalysisResult",
    "MetricMaps",
    "analyze_run",
    "compute_maps",
    "load_maps",
    "select_neurons",
]

_HOMES = {
    "AnalysisConfig": "analysis.config",
    "AnalysisResult": "analysis.run",
    "analyze_run": "analysis.run",
    "MetricMaps": "analysis.metric_maps",
    "compute_maps": "analysis.maps",
    "load_maps": "analysis.maps",
    "select_neurons": "analysis.select",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
