"""Paired comparison of two lm-eval passes over the same items: the unedited model and an edited one.

lm-eval scores every item (``log_samples``), and the two passes see the very same items, in the
same few-shot contexts, so the comparison is paired, item by item:

* a metric aggregated by a **mean** (accuracy, exact match, IFEval's prompt-level accuracy) gets
  Δ = after − before with a 95% paired bootstrap CI over items (:func:`interventions.stats.paired_delta`,
  the one ``probe intervene`` uses) and, where every per-item value is 0 or 1, the exact McNemar p
  on the discordant items;
* a metric with another aggregation (perplexity, corpus BLEU, F1, IFEval's instruction-level
  accuracy) gets Δ of the task's own aggregation and a paired bootstrap that recomputes it on
  resampled items (:data:`GENERIC_RESAMPLES` at most, since each resample runs the aggregation);
  no McNemar;
* a **group** (MMLU's 57 subjects) gets the group score exactly as lm-eval computes it (its
  children's means, weighted by size or not, per its ``aggregate_metric_list``), a bootstrap that
  resamples items within each child, and McNemar on all its 0/1 items pooled.

Per task it also counts the items whose output changed at all: the chosen answer of a
multiple-choice item, the text of a generation, the log-likelihood of a scoring request.

Example:
    >>> r = compare_values([1, 1, 0, 1], [0, 1, 0, 0], "mean", n_resamples=1000, seed=0)
    >>> r.before, r.after, r.delta, r.p_value, (r.lost, r.gained)
    (0.75, 0.25, -0.5, 0.5, (2, 0))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.records import flatten
from core.stats import mcnemar_p
from interventions.results import PlaceboRank
from interventions.stats import DISCORDANT_KEYS, PairedDelta, paired_delta, placebo_compare

GENERIC_RESAMPLES = 1000


@dataclass(frozen=True)
class TaskInfo:
    """What the comparison needs of an lm-eval task: its output type, and per metric its aggregation and direction."""

    output_type: str
    aggregation: dict[str, Callable[[list[Any]], float]]
    higher_is_better: dict[str, bool | None]


@dataclass(frozen=True)
class GroupInfo:
    """An lm-eval group: its leaf tasks and the metrics it aggregates (metric, filters or None: all, weight_by_size)."""

    leaves: tuple[str, ...]
    metrics: tuple[tuple[str, tuple[str, ...] | None, bool], ...]


@dataclass(frozen=True)
class Paired(PairedDelta):
    """Before/after of one metric on paired items; McNemar (``p_value``, ``lost``, ``gained``) only for a metric that
    is 0 or 1 per item (``binary``), else NaN and 0."""

    binary: bool = False
    method: str = "mean"  # "mean" | "aggregation" (recomputed per resample) | "group"


@dataclass
class MetricRow:
    """One line of the table: a metric of a task (or group) under one lm-eval filter, for one arm."""

    task: str
    metric: str
    filter: str
    higher_is_better: bool | None
    # before/after, Δ with its CI, McNemar where binary: written flat, in the file's keys and order
    effect: Paired = field(metadata=flatten(DISCORDANT_KEYS, after={"binary": "ci_high"}))
    items_changed: int | None  # None for a group row
    group: bool = False
    placebo: PlaceboRank | None = None  # with --placebo

    @property
    def key(self) -> tuple[str, str, str]:
        return self.task, self.metric, self.filter


@dataclass
class Items:
    """One pass's per-item output of one task: per filter, per metric, doc id → value; doc id → filtered response;
    doc id → target."""

    values: dict[str, dict[str, dict[int, Any]]] = field(default_factory=dict)
    responses: dict[str, dict[int, Any]] = field(default_factory=dict)
    targets: dict[int, Any] = field(default_factory=dict)


def items_of(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Items]:
    """lm-eval's ``results["samples"]`` as :class:`Items` per task."""
    out: dict[str, Items] = {}
    for task, rows in samples.items():
        items = out.setdefault(task, Items())
        for row in rows:
            flt, doc = str(row.get("filter", "none")), int(row["doc_id"])
            for metric in row.get("metrics", []):
                if metric in row:
                    items.values.setdefault(flt, {}).setdefault(metric, {})[doc] = row[metric]
            items.responses.setdefault(flt, {})[doc] = row.get("filtered_resps")
            items.targets[doc] = row.get("target")
    return out


def _is_mean(agg: Callable[..., Any] | str) -> bool:
    name = agg if isinstance(agg, str) else getattr(agg, "__name__", "")
    return name in ("mean", "nanmean")


def _numbers(values: Sequence[Any]) -> np.ndarray | None:
    if not all(isinstance(v, (bool, int, float, np.integer, np.floating)) for v in values):
        return None
    return np.asarray(values, dtype=float)


def compare_values(
    before: Sequence[Any], after: Sequence[Any], agg: Callable[[list[Any]], float] | str, *, n_resamples: int, seed: int
) -> Paired:
    """Paired before/after of one metric; ``agg`` is the task's aggregation (a function, or ``"mean"``)."""
    b, a = _numbers(before), _numbers(after)
    if _is_mean(agg) and b is not None and a is not None:
        binary = bool(np.isin(b, (0.0, 1.0)).all() and np.isin(a, (0.0, 1.0)).all())
        s = paired_delta(b, a, n_resamples=n_resamples, seed=seed)
        mcnemar = (s.p_value, s.lost, s.gained) if binary else (math.nan, 0, 0)
        return Paired(s.n, s.before, s.after, s.delta, s.ci_low, s.ci_high, *mcnemar, binary=binary)
    assert callable(agg), "a non-mean metric needs its aggregation function"
    return _recomputed(list(before), list(after), agg, min(n_resamples, GENERIC_RESAMPLES), seed)


def _recomputed(
    before: list[Any], after: list[Any], agg: Callable[[list[Any]], float], n_resamples: int, seed: int
) -> Paired:
    n = len(before)
    first, second = float(agg(before)), float(agg(after))
    rng, deltas = np.random.default_rng(seed), []
    for _ in range(n_resamples if n > 1 else 0):
        idx = rng.integers(0, n, n)
        try:
            deltas.append(float(agg([after[i] for i in idx])) - float(agg([before[i] for i in idx])))
        except (ZeroDivisionError, ValueError, FloatingPointError):  # a degenerate resample (e.g. F1 with one class)
            continue
    finite = [d for d in deltas if math.isfinite(d)]
    low, high = (
        (float(np.percentile(finite, 2.5)), float(np.percentile(finite, 97.5))) if finite else (math.nan, math.nan)
    )
    return Paired(n, first, second, second - first, low, high, math.nan, method="aggregation")


def compare_group(
    parts: list[tuple[np.ndarray, np.ndarray]], weight_by_size: bool, *, n_resamples: int, seed: int
) -> Paired:
    """A group's mean of its children's means (by size or equal weights), with a bootstrap within each child."""
    sizes = np.array([len(b) for b, _ in parts], dtype=float)
    weights = sizes / sizes.sum() if weight_by_size else np.full(len(parts), 1.0 / len(parts))
    before = float(sum(w * b.mean() for w, (b, _) in zip(weights, parts, strict=True)))
    after = float(sum(w * a.mean() for w, (_, a) in zip(weights, parts, strict=True)))
    rng, boot = np.random.default_rng(seed), np.zeros(n_resamples)
    for w, (b, a) in zip(weights, parts, strict=True):
        diff = a - b
        for start in range(0, n_resamples, 1000):  # bounded memory: 1000 resamples of one child at a time
            rows = min(1000, n_resamples - start)
            boot[start : start + rows] += w * diff[rng.integers(0, diff.size, (rows, diff.size))].mean(axis=1)
    pooled_b, pooled_a = np.concatenate([b for b, _ in parts]), np.concatenate([a for _, a in parts])
    binary = bool(np.isin(pooled_b, (0.0, 1.0)).all() and np.isin(pooled_a, (0.0, 1.0)).all())
    lost, gained = int(np.sum((pooled_b == 1) & (pooled_a == 0))), int(np.sum((pooled_b == 0) & (pooled_a == 1)))
    return Paired(
        int(sizes.sum()),
        before,
        after,
        after - before,
        float(np.percentile(boot, 2.5)),
        float(np.percentile(boot, 97.5)),
        float(mcnemar_p(lost, gained)) if binary else math.nan,
        lost if binary else 0,
        gained if binary else 0,
        binary=binary,
        method="group",
    )


def changed_items(output_type: str, before: dict[int, Any], after: dict[int, Any]) -> int:
    """Items whose output differs: the choice of highest log-likelihood (multiple choice), the text (generation), else
    the response itself (a log-likelihood)."""

    def chosen(resp: Any) -> Any:
        scores = [r[0] if isinstance(r, (list, tuple)) else r for r in resp]
        return int(np.argmax(scores)) if scores else None

    key = chosen if output_type == "multiple_choice" else (lambda r: r)
    return sum(key(before[d]) != key(after[d]) for d in before if d in after)


def identical(base: dict[str, Items], arm: dict[str, Items]) -> bool:
    """Whether every item's response (each choice's log-likelihood, each generated text) equals the unedited pass's."""
    return all(arm.get(task, Items()).responses == items.responses for task, items in base.items())


def compare_pass(
    infos: dict[str, TaskInfo],
    groups: dict[str, GroupInfo],
    base: dict[str, Items],
    arm: dict[str, Items],
    *,
    n_resamples: int,
    seed: int,
) -> list[MetricRow]:
    """Every task's (then every group's) metric rows of one arm against the baseline."""
    rows: list[MetricRow] = []
    for task in sorted(base):
        if task not in arm or task not in infos:
            continue
        rows.extend(_task_rows(task, infos[task], base[task], arm[task], n_resamples, seed))
    for name, group in groups.items():
        rows.extend(_group_rows(name, group, base, arm, n_resamples, seed))
    return rows


def _task_rows(task: str, info: TaskInfo, base: Items, arm: Items, n_resamples: int, seed: int) -> list[MetricRow]:
    rows = []
    for flt, metrics in base.values.items():
        changed = changed_items(info.output_type, base.responses.get(flt, {}), arm.responses.get(flt, {}))
        for metric, before in metrics.items():
            after = arm.values.get(flt, {}).get(metric, {})
            docs = sorted(d for d in before if d in after)
            agg = info.aggregation.get(metric, "mean")
            paired = compare_values(
                [before[d] for d in docs], [after[d] for d in docs], agg, n_resamples=n_resamples, seed=seed
            )
            rows.append(_row(task, metric, flt, info.higher_is_better.get(metric), paired, changed))
    return rows


def _group_rows(
    name: str, group: GroupInfo, base: dict[str, Items], arm: dict[str, Items], n_resamples: int, seed: int
) -> list[MetricRow]:
    rows = []
    for metric, filters, by_size in group.metrics:
        found = {flt for leaf in group.leaves if leaf in base for flt, m in base[leaf].values.items() if metric in m}
        for flt in sorted(found if filters is None else set(filters) & found):
            parts = []
            for leaf in group.leaves:
                before = base.get(leaf, Items()).values.get(flt, {}).get(metric, {})
                after = arm.get(leaf, Items()).values.get(flt, {}).get(metric, {})
                docs = sorted(d for d in before if d in after)
                b, a = _numbers([before[d] for d in docs]), _numbers([after[d] for d in docs])
                if docs and b is not None and a is not None:
                    parts.append((b, a))
            if parts:
                rows.append(
                    _row(
                        name,
                        metric,
                        flt,
                        None,
                        compare_group(parts, by_size, n_resamples=n_resamples, seed=seed),
                        None,
                        group=True,
                    )
                )
    return rows


def _row(
    task: str, metric: str, flt: str, higher: bool | None, p: Paired, changed: int | None, group: bool = False
) -> MetricRow:
    return MetricRow(task, metric, flt, higher, p, changed, group)


def add_placebo(rows: list[MetricRow], placebo_rows: list[list[MetricRow]]) -> None:
    """Place each row's Δ among the same row's Δs of the placebo passes (percentile, empirical p)."""
    for row in rows:
        deltas = [r.effect.delta for pr in placebo_rows for r in pr if r.key == row.key]
        if deltas:
            cmp = placebo_compare(row.effect.delta, deltas)
            row.placebo = PlaceboRank(cmp.percentile, cmp.p_empirical, cmp.placebo)
