"""Which prompts share a forward pass: batches filled up to a padded-token budget.

RoleMRC prompts run from about 250 to about 1,000 tokens, so one fixed ``--batch-size``
is either too small for the short prompts or too large (out of memory) for the long
ones. Prompts are recorded in ascending length order (:mod:`probes.prompts`), so a batch's
padded size is its prompt count times its *last* prompt's length; :func:`plan_batches`
fills each batch greedily up to ``max_batch_tokens`` padded tokens, with ``batch_size``
as a cap on the prompt count. A prompt longer than the budget gets a batch of its own:
nothing is ever dropped.

The plan is a pure function of the prompt lengths and the two limits, always computed
from the first prompt. That is what makes resuming and data-parallel recording
reproducible: every process, and every later call, sees the same batches, and a batch
is recorded by exactly one of them (:func:`pending_batches`).

Example:
    >>> plan_batches([100, 100, 200, 300, 900], batch_size=8, max_batch_tokens=600)
    [(0, 3), (3, 4), (4, 5)]
    >>> plan_batches([100, 100, 200, 300, 900], batch_size=2, max_batch_tokens=None)
    [(0, 2), (2, 4), (4, 5)]
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from core.budget import (
    CPU_MAX_BATCH_TOKENS,
    MAX_USEFUL_BATCH_TOKENS,
    activation_bytes_per_token,
    default_max_batch_tokens,
)

__all__ = [
    "CPU_MAX_BATCH_TOKENS",
    "DEFAULT_BATCH_SIZE",
    "MAX_USEFUL_BATCH_TOKENS",
    "activation_bytes_per_token",
    "default_max_batch_tokens",
    "pending_batches",
    "plan_batches",
]

DEFAULT_BATCH_SIZE = 64  # a cap: the token budget decides on long prompts


def plan_batches(lengths: Sequence[int], batch_size: int, max_batch_tokens: int | None) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering positions ``0..len(lengths)`` in order."""
    spans: list[tuple[int, int]] = []
    start = 0
    while start < len(lengths):
        stop, longest = start + 1, lengths[start]
        while stop < len(lengths) and stop - start < batch_size:
            longest_if_added = max(longest, lengths[stop])
            if max_batch_tokens is not None and (stop - start + 1) * longest_if_added > max_batch_tokens:
                break
            stop, longest = stop + 1, longest_if_added
        spans.append((start, stop))
        start = stop
    return spans


def pending_batches(
    spans: Sequence[tuple[int, int]], sample_ids: Sequence[int], done: Collection[int]
) -> list[list[int]]:
    """The positions still to record, batch by batch, in plan order.

    A batch whose samples are all done is skipped; one partly done (recorded earlier with
    other batch limits) keeps only its missing positions.

    >>> pending_batches([(0, 2), (2, 4)], [10, 11, 12, 13], done={10, 11, 12})
    [[3]]
    """
    pending = []
    for start, stop in spans:
        todo = [p for p in range(start, stop) if sample_ids[p] not in done]
        if todo:
            pending.append(todo)
    return pending
