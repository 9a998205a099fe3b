"""The attention function the stack's walk runs: the model's own, with grouped key/value heads read in place on a CPU.

``transformers``' ``sdpa`` attention hands torch's ``scaled_dot_product_attention`` grouped key/value heads in place
(``enable_gqa``) only where no mask is given; a prompt pass with padding, or a teacher-forced pass over prompts and
responses, has one, so it copies every layer's keys and values once per query head they serve (``repeat_kv``) and
attends over the copies. On a CPU, torch's flash kernel reads the grouped heads in place with the same arithmetic in
the same order (a query head reads the key/value head it would have read a copy of), so :func:`grouped_sdpa` gives
the same bits without the copies: SmolLM2's evaluation (three key/value heads for nine query heads) attends in 5.8 s
of its prompt passes where it took 8.1 (2 cores, docs/report.md). Everywhere else (a CUDA device, whose masked
grouped attention falls back to the math kernel; one query position, which ``transformers`` already packs; any
keyword ``sdpa`` handles beyond the plain call) it is ``transformers``' own function. A model loaded with another
implementation (``eager``) keeps it.

Past :data:`KEY_BLOCK` keys, a masked call on a CPU runs in chunks of queries (:func:`key_chunks`): the first 512
queries of a causal pass over the first 512 keys only, the next 512 over 1,024, and so on. torch's kernel reads keys in
blocks of 512 and a fully masked block adds nothing to a query, so the bits are the same; a pass of two SmolLM2
prompts of about 2,000 tokens took 7.5–8.2 s instead of 8.9–9.1 (2 cores), one of four prompts of about 1,000 tokens
6.4–7.1 s against 6.6–6.8. The default pair's prompts stay under 512 tokens, where nothing changes.

:func:`walk_attention` is what the walk (:func:`access.stack.walk`) runs under: the model's implementation, or
:data:`GROUPED_SDPA` for ``sdpa``, set on its config for the walk and given back after it (:func:`attention_as`).

Example:
    >>> import torch
    >>> from types import SimpleNamespace
    >>> module = SimpleNamespace(num_key_value_groups=3, is_causal=True)
    >>> query, keys = torch.randn(2, 6, 5, 4), torch.randn(2, 2, 5, 4)
    >>> mask = torch.ones(2, 1, 5, 5, dtype=torch.bool).tril()
    >>> mask[1, ..., :2] = False                            # the second row's two positions of left padding
    >>> from transformers.integrations.sdpa_attention import sdpa_attention_forward
    >>> repeated, _ = sdpa_attention_forward(module, query, keys, keys, mask, scaling=0.5)
    >>> grouped, _ = grouped_sdpa(module, query, keys, keys, mask, scaling=0.5)
    >>> torch.equal(grouped, repeated)
    True
    >>> walk_name("sdpa"), walk_name("eager")
    ('probe_sdpa', 'eager')
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import torch

from access.packed_rows import PACKED_ROWS, PackedRows

GROUPED_SDPA = "probe_sdpa"  # the stack's sdpa: grouped key/value heads read in place under a mask, on a CPU
KEY_BLOCK = 512  # the keys torch's CPU flash kernel reads as one block (kv_split_size in FlashAttentionKernel.cpp)
# the keywords a decoder layer hands its attention function that the plain call below honours (or that sdpa ignores)
_PLAIN = frozenset({"dropout", "scaling", "is_causal", "position_ids", "use_cache", "cache_position", "sliding_window"})


def grouped_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """``transformers``' ``sdpa`` attention, with ``key`` and ``value``'s grouped heads read in place (not repeated)
    under a mask on a CPU: the same bits (module doc); a packed pass's queries (:mod:`access.packed_rows`) attend in
    their padded places."""
    rows: PackedRows | None = kwargs.pop(PACKED_ROWS, None)
    if rows is None:
        return _attended(module, (query, key, value), attention_mask, kwargs), None
    return rows.pack(_attended(module, (rows.heads_unpacked(query), key, value), attention_mask, kwargs)), None


def _attended(
    module: torch.nn.Module, qkv: tuple[torch.Tensor, ...], attention_mask: torch.Tensor | None, kwargs: dict[str, Any]
) -> torch.Tensor:
    """:func:`grouped_sdpa`'s attention ``[rows, positions, heads, dim]`` of unpacked queries: on a CPU under a
    boolean mask, chunk by chunk of :func:`key_chunks` (the same bits)."""
    query, key, value = qkv
    plain = set(kwargs) <= _PLAIN and query.shape[2] > 1 and query.device.type == "cpu"
    if not plain or attention_mask is None:
        return _attended_once(module, qkv, attention_mask, kwargs, plain=False)
    if attention_mask.dtype != torch.bool or attention_mask.shape[-2:] != (query.shape[2], key.shape[2]):
        return _attended_once(module, qkv, attention_mask, kwargs, plain=True)
    chunks = key_chunks(attention_mask)
    parts = [
        _attended_once(
            module,
            (query[:, :, start:end], key[:, :, :keys], value[:, :, :keys]),
            attention_mask[..., start:end, :keys],
            kwargs,
            plain=True,
        )
        for start, end, keys in chunks
    ]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


def key_chunks(mask: torch.Tensor) -> list[tuple[int, int, int]]:
    """The query chunks ``(start, end, keys)`` of a boolean ``mask`` ``[..., queries, keys]``: each chunk's queries
    attend over its first ``keys`` keys only, the key blocks past them masked for every one of its queries.

    torch's CPU flash kernel reads keys in blocks of :data:`KEY_BLOCK` from the first, and a block whose every key is
    masked for a query adds nothing to it (its exponentials are 0, its running maximum and sum unchanged, its output
    rescaled by 1): without those trailing blocks a query gets the same bits. A query's blocks do not depend on the
    other queries of its call, but a call of one query rounds otherwise, so a chunk holds two queries at least.

    Example:
        >>> causal = torch.ones(1100, 1100, dtype=torch.bool).tril()
        >>> key_chunks(causal)
        [(0, 512, 512), (512, 1024, 1024), (1024, 1100, 1100)]
        >>> key_chunks(causal[:1025, :1025])    # the last query would be a chunk of its own
        [(0, 512, 512), (512, 1025, 1025)]
        >>> key_chunks(causal[:500, :500])
        [(0, 500, 500)]
    """
    queries, keys = mask.shape[-2:]
    if keys <= KEY_BLOCK or queries < 2:
        return [(0, queries, keys)]
    allowed = mask.reshape(-1, queries, keys).any(0)
    last = keys - 1 - allowed.flip(-1).to(torch.uint8).argmax(-1)  # a query that sees no key reads them all
    needed = ((last // KEY_BLOCK + 1) * KEY_BLOCK).clamp(max=keys)
    widths, counts = torch.unique_consecutive(needed, return_counts=True)
    ends = counts.cumsum(0).tolist()
    chunks: list[tuple[int, int, int]] = []
    for start, end, width in zip([0, *ends[:-1]], ends, widths.tolist(), strict=True):
        if chunks and (end - start < 2 or chunks[-1][1] - chunks[-1][0] < 2):  # no chunk of one query
            start, width = chunks[-1][0], max(chunks.pop()[2], width)
        chunks.append((start, end, width))
    return chunks


def _attended_once(
    module: torch.nn.Module,
    qkv: tuple[torch.Tensor, ...],
    attention_mask: torch.Tensor | None,
    kwargs: dict[str, Any],
    *,
    plain: bool,
) -> torch.Tensor:
    """One call of the attention: torch's kernel on the grouped heads in place where ``plain`` (CPU, a mask, the
    plain keywords) and the heads are grouped, else ``transformers``' sdpa."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    query, key, value = qkv
    groups = getattr(module, "num_key_value_groups", 1)
    if groups == 1 or not plain:
        output: torch.Tensor = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)[0]
        return output
    output = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=kwargs.get("dropout", 0.0),
        scale=kwargs.get("scaling"),
        enable_gqa=True,
    )
    return output.transpose(1, 2).contiguous()


def walk_name(implementation: str) -> str:
    """The attention implementation the stack's walk runs for a model loaded with ``implementation``."""
    return GROUPED_SDPA if implementation == "sdpa" else implementation


@contextmanager
def attention_as(config: Any, name: str) -> Iterator[None]:
    """The model's attention implementation set to ``name`` inside, given back after (its sub-configs untouched: the
    decoders the stack runs have none)."""
    _register()
    with mock.patch.object(config, "_attn_implementation_internal", name):
        yield


def walk_attention(config: Any) -> Any:
    """What the walk runs under: ``config``'s implementation as :func:`walk_name` maps it."""
    return attention_as(config, walk_name(config._attn_implementation))


@functools.cache
def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa)
