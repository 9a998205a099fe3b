"""The selection rules of ``--select`` by name, and the metric each ranks by: torch-free, so that the option's help
and its check are read from here at start-up (:mod:`interventions.select_rules` holds what each rule does).

Example:
    >>> RULE_METRICS["count"], "local_mean_diff" in LOCAL_RULES
    ('topk_count', True)
"""

from __future__ import annotations

from analysis.config import ATTRIBUTION, EFFECT_SIZE, MEAN_DIFF, TOPK_COUNT

RULE_METRICS: dict[str, str] = {
    "count": TOPK_COUNT,
    MEAN_DIFF: MEAN_DIFF,
    EFFECT_SIZE: EFFECT_SIZE,
    ATTRIBUTION: ATTRIBUTION,
    "weight": "weight_change",
    "local_count": TOPK_COUNT,
    "local_mean_diff": MEAN_DIFF,
    "local_effect_size": EFFECT_SIZE,
}
LOCAL_RULES = ("local_count", "local_mean_diff", "local_effect_size")  # each layer on the same input (analysis.basis)
