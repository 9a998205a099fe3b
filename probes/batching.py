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
from typing import Any

DEFAULT_BATCH_SIZE = 64  # a cap: the token budget decides on long prompts
# Past about this many padded tokens a batch is no faster, while a wider batch spans more prompt
# lengths and so pads more: measured on an H100 with the 8B shape, and on the 2-core CPU with the
# SmolLM2 pair, where smaller batches of long prompts are faster still (docs/probes.md).
MAX_USEFUL_BATCH_TOKENS = 8192
CPU_MAX_BATCH_TOKENS = 2048
# Fraction of the free GPU memory (after both models are loaded) a batch may use; the rest
# covers the allocator's fragmentation, kernels' workspaces and the estimate's error.
GPU_MEMORY_FRACTION = 0.5
_ROUND = 256  # budgets derived from free memory are rounded down, so that they are the same from call to call


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


def pending_batches(spans: Sequence[tuple[int, int]], sample_ids: Sequence[int], done: Collection[int]) -> list[list[int]]:
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


def activation_bytes_per_token(config: Any, dtype_bytes: int, longest: int) -> int:
    """Peak transient memory of one padded token inside one decoder block.

    A block holds, at its peak, the residual stream and its normed copy, q/k/v and the
    attention output (about 6 hidden-size vectors) and the MLP's gate, up and activated
    products (3 intermediate-size vectors); blocks run one after another, so depth does not
    add up. The attention mask adds a float32 row of ``longest`` per token. Measured on an
    H100 (``benchmarks/bench_probes.py``, part 2): 118 KiB per token for the 8B shape in bf16
    against 136 KiB estimated; 10.7 against 8.4 for a tiny model, where small buffers the
    estimate leaves out weigh more (the budget keeps half the free memory in reserve).
    """
    hidden = int(config.hidden_size)
    intermediate = int(getattr(config, "intermediate_size", None) or 4 * hidden)
    return dtype_bytes * (6 * hidden + 3 * intermediate) + 4 * longest


def default_max_batch_tokens(device: str, config: Any, dtype_bytes: int, longest: int) -> int:
    """The budget for a device: :data:`CPU_MAX_BATCH_TOKENS` on CPU; on a GPU :data:`MAX_USEFUL_BATCH_TOKENS`,
    less where free memory is short.

    Under ``device_map="auto"`` the model spans every visible GPU; the one with least free
    memory decides.
    """
    if not (device.startswith("cuda") or device == "auto"):
        return CPU_MAX_BATCH_TOKENS
    import torch

    if not torch.cuda.is_available():
        return CPU_MAX_BATCH_TOKENS
    indices = [torch.device(device).index or 0] if device.startswith("cuda") else list(range(torch.cuda.device_count()))
    free = min(torch.cuda.mem_get_info(i)[0] for i in indices)
    budget = int(GPU_MEMORY_FRACTION * free) // activation_bytes_per_token(config, dtype_bytes, longest)
    return max(_ROUND, min(MAX_USEFUL_BATCH_TOKENS, budget // _ROUND * _ROUND))
