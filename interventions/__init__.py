"""Interventions: scale chosen neurons during generation and measure the effect, with controls.

The public surface:

* :func:`scaled_units` — context manager scaling units of a hook point at every forward
  (torch hooks; product in float32; hooks always removed);
* :class:`ABGenerator` / :class:`Intervention` — repeatable batched generation of the same
  prompts per arm, torch or nnsight backend;
* :class:`ABConfig` / :func:`run_ab` / :class:`ABReport` — the placebo-controlled A/B
  evaluation behind ``probe intervene``.

Example:
    >>> from interventions import ABConfig, run_ab                                  # doctest: +SKIP
    >>> report = run_ab(ABConfig(run_dir="runs/x", capability="multi_turn", factor=0.0))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "run_ab": "interventions.ab",
    "ABConfig": "interventions.config",
    "ABGenerator": "interventions.generation",
    "Generations": "core.generation",
    "Intervention": "interventions.generation",
    "ABReport": "interventions.results",
    "ArmResult": "interventions.results",
    "CapabilityResult": "interventions.results",
    "NoOpGuard": "interventions.results",
    "PAPER_FACTOR": "interventions.scaling",
    "dtype_noop_fraction": "interventions.scaling",
    "scaled_units": "interventions.scaling",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import on first use, so reading a report (``interventions.results``) does not load torch."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'interventions' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
