"""The selection rules of ``--select`` by name, and the metric each ranks by, read off the rankings' table
(:func:`analysis.rankings.select_rules`, torch-free, so that the option's help and its check are read at start-up;
:mod:`interventions.select_rules` holds what each rule does).

Example:
    >>> RULE_METRICS["count"], RULE_METRICS["local_mean_diff"], RULE_METRICS["weight"]
    ('topk_count', 'mean_diff', 'weight_change')
"""

from __future__ import annotations

from analysis.rankings import select_rules

RULE_METRICS: dict[str, str] = {rule: name for rule, (name, _) in select_rules().items()}
