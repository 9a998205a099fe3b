"""Recall@K of known units in any ranking of units: the score of a ranking on a planted pair.

A ranking is a list of ``(layer, unit)`` pairs, most-changed first: a neuron set's units in
order (``probe analyze`` writes them ranked by |Δ|), the units of a weight-change map sorted by
change, or any other order. Given the planted units (:func:`training.planted.read_planted`),
:func:`planted_ranks` says where each one landed (0: not in the ranking at all) and
:func:`recall_at_k` the share of them among the first ``k``.

Example:
    >>> ranking = [(3, 7), (0, 2), (5, 1), (3, 9)]
    >>> planted_ranks(ranking, [(0, 2), (3, 9), (8, 8)])
    [2, 4, 0]
    >>> recall_at_k(ranking, [(0, 2), (3, 9), (8, 8)], k=2), recall_at_k(ranking, [(0, 2), (3, 9), (8, 8)], k=4)
    (0.3333333333333333, 0.6666666666666666)
    >>> ranked_by_value({(0, 1): 0.5, (2, 0): -3.0, (1, 1): 0.0})   # |value| descending, zeros never ranked
    [(2, 0), (0, 1)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.errors import ProbeError

Unit = tuple[int, int]


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
