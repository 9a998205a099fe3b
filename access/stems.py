"""Shared decoding's prompt batches: prompts that begin alike (a system turn, a passage) batched around their stem.

:class:`access.shared_generation.SharedDecoder` runs a stem, the first tokens its prompts share, once per arm, and
each prompt's own remainder over the stem's keys and values (:class:`access.kv_cache.Seed`). The A/B prompts of the
default pair share about a third of their tokens this way. Prompts that share no stem batch by length, as
:class:`access.generation.Generator` batches them.

Example:
    >>> system = list(range(100, 120))   # 20 tokens that prompts 0 and 2 begin with
    >>> batches = stem_batches([[*system, 1, 2], [7, 8, 9], [*system, 3]], batch_size=4)
    >>> batches
    [[Stem(length=20, members=(0, 2))], [Stem(length=0, members=(1,))]]
    >>> [members(batch) for batch in batches]
    [[0, 2], [1]]
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

MIN_STEM = 16  # tokens prompts must share for their stem to run once (a shorter one is not worth its own pass)


@dataclass(frozen=True)
class Stem:
    """Prompts (indices) that share their first ``length`` tokens, which run once for all of them (0: no shared run)."""

    length: int
    members: tuple[int, ...]


def stem_batches(prompts: Sequence[list[int]], batch_size: int) -> list[list[Stem]]:
    """The prompts in batches of at most ``batch_size``, as stems.

    In token order, a prompt joins the group before it while that raises the tokens the group shares,
    (members - 1) x the stem's length, with at least :data:`MIN_STEM` shared; each prompt keeps at least
    its last token to itself. Groups are batched whole, by their longest remainder. Prompts that share no
    stem batch by length, as :class:`~access.generation.Generator` batches them.
    """
    groups: list[tuple[int, list[int]]] = []  # (tokens shared, prompts)
    for index in sorted(range(len(prompts)), key=lambda i: list(prompts[i])):
        if groups and len(groups[-1][1]) < batch_size:
            length, group = groups[-1]
            common = min(
                len(os.path.commonprefix([prompts[group[0]], prompts[index]])),  # noqa: RUF071 - token ids, as meant
                len(prompts[index]) - 1,
                length,
            )
            if common >= MIN_STEM and len(group) * common > (len(group) - 1) * length:
                groups[-1] = (common, [*group, index])
                continue
        groups.append((len(prompts[index]) - 1, [index]))
    stems = [Stem(length, tuple(sorted(group))) for length, group in groups if len(group) > 1]
    stems.sort(key=lambda s: (max(len(prompts[i]) for i in s.members) - s.length, s.members[0]))
    lonely = sorted(
        (Stem(0, (g[0],)) for _, g in groups if len(g) == 1), key=lambda s: (len(prompts[s.members[0]]), s.members[0])
    )
    batches: list[list[Stem]] = []
    for stem in stems + lonely:
        size = sum(len(s.members) for s in batches[-1]) if batches else batch_size
        if size + len(stem.members) > batch_size or (batches and bool(batches[-1][0].length) != bool(stem.length)):
            batches.append([])
        batches[-1].append(stem)
    return batches


def stem_batches_within(
    prompts: Sequence[list[int]], parts: Sequence[Sequence[int]], batch_size: int
) -> list[list[Stem]]:
    """:func:`stem_batches` of each part of the prompts (indices into ``prompts``) on its own, in turn: batches that
    never mix prompts of two parts.

    >>> system = list(range(100, 120))
    >>> stem_batches_within([[*system, 1], [7, 8], [*system, 2], [*system, 3]], [[0, 1], [2, 3]], batch_size=4)
    [[Stem(length=0, members=(1,)), Stem(length=0, members=(0,))], [Stem(length=20, members=(2, 3))]]
    """
    return [
        [Stem(stem.length, tuple(part[i] for i in stem.members)) for stem in batch]
        for part in parts
        for batch in stem_batches([prompts[i] for i in part], batch_size)
    ]


def stem_tokens(prompts: Sequence[Sequence[int]], batches: Sequence[Sequence[Stem]]) -> int:
    """The prompt tokens one pass over ``batches`` runs through each block: every stem once, each prompt's remainder.

    >>> stem_tokens([[*range(20), 1], [*range(20), 2]], [[Stem(20, (0, 1))]])   # 20 + 1 + 1, not 42
    22
    """
    return sum(s.length + sum(len(prompts[i]) - s.length for i in s.members) for b in batches for s in b)


def members(batch: Sequence[Stem]) -> list[int]:
    """The prompts of a batch of stems, in the order their rows run."""
    return [i for stem in batch for i in stem.members]
