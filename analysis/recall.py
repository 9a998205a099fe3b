"""Recall of planted ground truth: how many of a pair's known changed units each ranking puts in its top K.

On a planted pair (:mod:`training.planted`: "DPO" is "SFT" with the MLP input rows of K known units scaled, every
other weight identical), a ranking that finds "the units that changed" must put those K units first. For every
activation metric (count, mean difference, effect size) and both bases (:mod:`analysis.basis`), :func:`planted_recall`
ranks every unit of every layer by |Δ| (the rule of ``probe analyze``'s neuron sets: ties by layer then unit, Δ = 0
never ranked) and counts the planted units among the top ``k``, for each ``k`` asked (``None``: K itself).

The primitives work on any ranking, a list of ``(layer, unit)`` pairs most-changed first (a neuron set's units in
order, a weight-change map sorted by change): :func:`planted_ranks` says where each planted unit landed (0: not
ranked) and :func:`recall_at_k` the share of them among the first ``k``.

The verdict rule, written before any result was read (issue 38): the local basis must recover the planted units at
recall >= 0.95 in its top K (:data:`LOCAL_RECALL_TARGET`). The global basis has no target: its table is evidence.

Example:
    >>> rows = planted_recall("runs/planted", [(2, 17), (9, 4)], hook="mlp_post")        # doctest: +SKIP
    >>> print(recall_table(rows))                                                        # doctest: +SKIP
    | metric | basis | top K | found | recall | ranks of the planted units |
    ...
    >>> RecallRow("mean_diff", "local", "dpo_on_sft", 2, 2, 2, [1, 2], [2, 9]).recall
    1.0
    >>> ranking = [(3, 7), (0, 2), (5, 1), (3, 9)]
    >>> planted_ranks(ranking, [(0, 2), (3, 9), (8, 8)]), recall_at_k(ranking, [(0, 2), (3, 9), (8, 8)], k=2)
    ([2, 4, 0], 0.3333333333333333)
    >>> ranked_by_value({(0, 1): 0.5, (2, 0): -3.0, (1, 1): 0.0})   # |value| descending, zeros never ranked
    [(2, 0), (0, 1)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from access.hook_table import NEURONS
from analysis.basis import basis_of_settings
from analysis.config import AnalysisConfig
from analysis.local_basis import basis_maps, top_unit_pairs
from analysis.profile import layer_profile
from analysis.rankings import BASES, activation_metrics
from core.errors import ProbeError
from probes.store import RunReader

LOCAL_RECALL_TARGET = 0.95
Unit = tuple[int, int]


@dataclass(frozen=True)
class RecallRow:
    """One metric × basis × k: the planted units found among the top ``k``, and every planted unit's rank."""

    metric: str
    basis: str
    direction: str | None  # the local direction (None: global)
    k: int
    found: int
    planted: int
    ranks: list[int]  # 1-based rank of each planted unit in its order (0: not ranked, its Δ is 0)
    top_layers: list[int]  # the profile's five top layers (mean |Δ|)

    @property
    def recall(self) -> float:
        return self.found / self.planted if self.planted else 0.0


def planted_recall(
    run_dir: str | Path,
    units: Sequence[tuple[int, int]],
    capability: str = "multi_turn",
    hook: str = NEURONS,
    ks: Sequence[int | None] = (None,),
    metrics: Sequence[str] | None = None,
    bases: Sequence[str] = BASES,
    layers: str = "all",
) -> list[RecallRow]:
    """One :class:`RecallRow` per metric (default: every activation ranking) × basis × k (module doc); ``layers``: the
    window ranked (default all)."""
    planted = [(int(layer), int(unit)) for layer, unit in units]
    rows = []
    with RunReader(run_dir) as run:
        for metric in metrics if metrics is not None else activation_metrics():
            config = AnalysisConfig(metric=metric, layers=layers, stability_resamples=0)
            for basis in bases:
                maps = basis_maps(run, capability, hook, config, basis)
                ranks = planted_ranks(top_unit_pairs(maps), planted)
                top = [r.layer for r in layer_profile(maps, config.fdr_alpha)[:5]]
                direction = basis_of_settings(maps.settings)[1]
                for k in ks:
                    size = len(planted) if k is None else k
                    found = sum(0 < rank <= size for rank in ranks)
                    rows.append(RecallRow(metric, basis, direction, size, found, len(planted), ranks, top))
    return rows


def recall_table(rows: Sequence[RecallRow]) -> str:
    """The rows as a Markdown table (metric × basis × k), with the local target's verdict where it applies."""
    lines = [
        "| metric | basis | top K | found | recall | verdict | median rank | worst rank | top layers |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ranked = sorted(r for r in row.ranks if r > 0)
        unranked = len(row.ranks) - len(ranked)
        median = ranked[len(ranked) // 2] if ranked else 0
        worst = "not ranked" if unranked else str(max(ranked, default=0))
        verdict = "-"
        if row.basis == "local" and row.k == row.planted:
            verdict = "PASS" if row.recall >= LOCAL_RECALL_TARGET else "FAIL"
        basis = row.basis + (f" ({row.direction})" if row.direction else "")
        lines.append(
            f"| {row.metric} | {basis} | {row.k} | {row.found}/{row.planted} | {row.recall:.2f} | {verdict} | "
            f"{median} | {worst} | {', '.join(map(str, row.top_layers))} |"
        )
    return "\n".join(lines)


def planted_ranks(ranking: Sequence[Unit], planted: Sequence[Unit]) -> list[int]:
    """The 1-based rank of each planted unit in ``ranking`` (0 where it is absent), in the order of ``planted``."""
    order: dict[Unit, int] = {}
    for rank, unit in enumerate(ranking, start=1):
        order.setdefault((int(unit[0]), int(unit[1])), rank)
    return [order.get((int(layer), int(unit)), 0) for layer, unit in planted]


def recall_at_k(ranking: Sequence[Unit], planted: Sequence[Unit], k: int | None = None) -> float:
    """Share of ``planted`` among the first ``k`` units of ``ranking`` (``k=None``: as many as are planted)."""
    if not planted:
        raise ProbeError("recall@K needs at least one planted unit")
    size = len(planted) if k is None else k
    if size < 1:
        raise ProbeError(f"recall@K: k must be a positive integer, got {size}")
    return sum(0 < rank <= size for rank in planted_ranks(ranking, planted)) / len(planted)


def ranked_by_value(values: Mapping[Unit, float]) -> list[Unit]:
    """Units by |value| descending (ties by layer, then unit); units whose value is 0 are left out, as
    ``probe analyze``'s neuron sets leave out Δ = 0."""
    return sorted((u for u, v in values.items() if v != 0), key=lambda u: (-abs(values[u]), u[0], u[1]))
