"""Interventions: the A/B experiment: edit chosen units during generation and measure the effect, with controls.

The public surface:

* :class:`ABConfig` (its edit an :class:`EditSpec`) / :func:`plan_ab` -> :class:`ABPlan` / :func:`run_ab` /
  :class:`ABReport` — the placebo-controlled A/B evaluation behind ``probe intervene``, resolved and checked
  before it runs;
* :func:`scaled_units`, :class:`ABGenerator` / :class:`Intervention` — re-exported from :mod:`access`, where
  edits, drivers and generation live.

Inside ``run_ab``: the generation passes (:mod:`interventions.passes`), each arm's scores
(:mod:`interventions.scoring`), placebo ranking (:mod:`interventions.placebos`), continuous outcomes
(:mod:`interventions.outcome_runs`, one :class:`~interventions.outcome_kinds.Outcome` row each) and coherence
(:mod:`interventions.coherence`); each ``--edit`` recipe is one :class:`~interventions.recipes.Recipe` row.

Example:
    >>> import interventions
    >>> interventions.PAPER_FACTOR   # imported from access.factors on first use
    0.999999
    >>> interventions.run_abc
    Traceback (most recent call last):
    AttributeError: module 'interventions' has no attribute 'run_abc'
    >>> from interventions import ABConfig, plan_ab, run_ab                                       # doctest: +SKIP
    >>> report = run_ab(plan_ab(ABConfig(run_dir="runs/x", capability="multi_turn", factor=0.0)))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "run_ab": "interventions.ab",
    "ABConfig": "interventions.config",
    "EditSpec": "interventions.edit_spec",
    "plan_ab": "interventions.plan",
    "ABPlan": "interventions.plan",
    "ABGenerator": "access.edited_generation",
    "Generations": "access.generation",
    "Intervention": "access.edited_generation",
    "ABReport": "interventions.results",
    "ArmResult": "interventions.results",
    "CapabilityResult": "interventions.results",
    "NoOpGuard": "interventions.results",
    "PAPER_FACTOR": "access.factors",
    "dtype_noop_fraction": "access.scaling",
    "scaled_units": "access.edits",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import on first use, so reading a report (``interventions.results``) does not load torch."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'interventions' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
