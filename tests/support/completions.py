"""The completions the exhaustive stopping-rule tests enumerate (tests/test_interventions_sequential.py,
tests/test_localize_sequential.py): every way to split the placebo sets among a few kinds of value."""

from __future__ import annotations

from functools import cache


@cache
def counts(n: int, parts: int) -> list[tuple[int, ...]]:
    """Every way to split ``n`` sets among ``parts`` kinds of value."""
    if parts == 1:
        return [(n,)]
    return [(k, *rest) for k in range(n + 1) for rest in counts(n - k, parts - 1)]


def values(kinds: list[float], split: tuple[int, ...]) -> list[float]:
    """The values of one split: each kind repeated as often as the split says."""
    return [v for v, c in zip(kinds, split, strict=True) for _ in range(c)]
