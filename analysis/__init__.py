"""Analysis: SFT-vs-DPO discrepancy maps, layer profiles, neuron sets and plots.

``from analysis import analyze_run`` is the entry point (see :mod:`analysis.run`).
Exports are resolved lazily so that ``import access.units`` (what
interventions need) does not pull in plotly, scipy and h5py.
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
