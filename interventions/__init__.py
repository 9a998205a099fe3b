"""Interventions: the A/B experiment: edit chosen units during generation and measure the effect, with controls.

The public surface:

* :class:`ABConfig` (its edit an :class:`EditSpec`) / :func:`plan_ab` -> :class:`ABPlan` / :func:`run_ab` /
  :class:`ABReport` — the placebo-controlled A/B evaluation behind ``probe intervene``, resolved and checked
  before it runs;
* :func:`scaled_units`, :class:`ABGenerator` / :class:`Intervention` — re-exported from :mod:`access`, where
  edits, drivers and generation live.

Modules:
    config, edit_spec       ``ABConfig``; ``EditSpec``, the one edit spec ``probe intervene``, ``probe lmeval`` and
                            ``probe replicate`` nest
    plan                    ``plan_ab``: every input resolved and checked before anything is generated
    recipes                 what each ``--edit`` name adds to a run: one ``Recipe`` row each, its arms built from the
                            run's data
    selection               which units: a neuron-set file, the top K of a run's ranking, or a ``layer:unit`` list
    select_rules            ``--select``: the K units each rule picks and where its ranking comes from
    rule_table              the ``--select`` rules by name, read off the rankings' table
    select_compare          which rule finds units that matter, by the causal effect of editing them
    ab, parallel, arms      ``run_ab(plan)``; the launcher that plans on every rank; finished arms kept on disk
    passes                  the generation passes of a run: listed, shared, decoded, kept and resumed
    scoring, coherence      an arm's judge verdicts, ROUGE-L and BLEU; its fluency as perplexity under SFT
    outcomes, outcome_runs  which rows and responses are teacher-forced; every arm's continuous outcomes measured
    outcome_kinds           the continuous outcomes, one ``Outcome`` row each
    placebos                each arm's placebo sets ranked against it
    sequential              which placebo sets run (generated, teacher-forced): decide-first, then until fixed
    stats, evidence         paired statistics and placebo ranks; how an arm's effect is read, fixed in advance
    results, report, cells  the report as typed records; written as JSON and markdown; the paired-delta table

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
