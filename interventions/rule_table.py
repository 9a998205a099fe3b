"""The selection rules of ``--select`` by name, and the metric each ranks by: torch-free, so that the option's help
and its check are read from here at start-up (:mod:`interventions.select_rules` holds what each rule does).

Example:
    >>> RULE_METRICS["count"], "local_mean_diff" in LOCAL_RULES
    ('topk_count', True)
"""

from __future__ import annotations

RULE_METRICS: dict[str, str] = {
    "count": "topk_count",
    "mean_diff": "mean_diff",
    "effect_size": "effect_size",
    "attribution": "attribution",
    "weight": "weight_change",
    "local_count": "topk_count",
    "local_mean_diff": "mean_diff",
    "local_effect_size": "effect_size",
}
LOCAL_RULES = ("local_count", "local_mean_diff", "local_effect_size")  # each layer on the same input (analysis.basis)
