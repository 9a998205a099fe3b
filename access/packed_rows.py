"""A prompt pass over its real tokens only: left padding skips every product, norm and activation of the walk.

A batch of prompts is left-padded to its longest, and a block's products, norms and activations run on every padded
position: on the default pair's held-out evaluation, 11% of the prompt passes' tokens. :class:`PackedRows` walks a
pass's real tokens alone, as one row (:func:`access.stack.run_blocks` with ``packed``): each block projects, rotates,
normalises and multiplies only them, and its attention sets them back in their padded places
(:func:`access.attention.grouped_sdpa`), so that it attends over the same positions under the same mask as the padded
pass. The keys and values the cache keeps are the padded pass's, with zeros where padding was (the mask hides them,
as :func:`access.kv_cache.joined` zeroes a slice's trimmed padding).

It changes no bit of a real token. On a CPU in float32, oneDNN's packed products gave a row the same bits at each row
count tried past one, up to 2,099 (SmolLM2's shapes, 2026-11-30; :mod:`access.packed_linear`), and a pass packs at
least two tokens (its longest row's); norms, rotary embeddings and activations work row by row; attention sees each
query's keys at the padded pass's positions. A pass packs only where that holds (:func:`packs`): a model whose
products :func:`access.packed_linear.prepacked` packs (a CPU model in float32) with ``sdpa`` attention, a pass with
padding, and no edit or site function that reads the batch's positions (:class:`access.decode_step.BatchDecoder`
decides that; its passes run under ``prepacked``).

Example:
    >>> mask = torch.tensor([[0, 1, 1], [1, 1, 1]])   # the first prompt has one position of left padding
    >>> rows = PackedRows.of(mask)
    >>> rows.index.tolist(), rows.shape
    ([1, 2, 3, 4, 5], (2, 3))
    >>> hidden = torch.arange(6.0).reshape(2, 3, 1)
    >>> rows.pack(hidden).flatten().tolist()
    [1.0, 2.0, 3.0, 4.0, 5.0]
    >>> rows.unpack(rows.pack(hidden)).flatten().tolist()   # zeros where padding was
    [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from einops import rearrange

from access.packed_linear import packable

PACKED_ROWS = "packed_rows"  # the keyword each layer passes its attention function: the pass's PackedRows


@dataclass(frozen=True)
class PackedRows:
    """Where a padded pass's real tokens are: ``index`` into its ``shape`` (rows, positions) flattened."""

    index: torch.Tensor
    shape: tuple[int, int]

    @classmethod
    def of(cls, mask: torch.Tensor) -> PackedRows:
        """The real tokens of a pass whose own positions ``mask`` ``[rows, positions]`` marks (1: real)."""
        (index,) = torch.nonzero(rearrange(mask, "r p -> (r p)"), as_tuple=True)
        return cls(index, (int(mask.shape[0]), int(mask.shape[1])))

    def pack(self, padded: torch.Tensor) -> torch.Tensor:
        """``padded`` ``[rows, positions, ...]`` as one row of its real tokens ``[1, tokens, ...]``."""
        return rearrange(rearrange(padded, "r p ... -> (r p) ...").index_select(0, self.index), "t ... -> 1 t ...")

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """``packed`` ``[1, tokens, ...]`` set back in its padded places ``[rows, positions, ...]``, zeros between."""
        rows, positions = self.shape
        flat = packed.new_zeros(rows * positions, *packed.shape[2:])
        flat.index_copy_(0, self.index, packed[0])
        return rearrange(flat, "(r p) ... -> r p ...", r=rows)

    def heads_unpacked(self, packed: torch.Tensor) -> torch.Tensor:
        """A block's heads ``[1, heads, tokens, dim]`` in their padded places ``[rows, heads, positions, dim]``, zeros
        between (heads within positions in memory, as a projection's output viewed by head is)."""
        return rearrange(self.unpack(rearrange(packed, "1 h t d -> 1 t h d")), "r p h d -> r h p d")


class PackedCache:
    """A pass's cache, seen from its packed walk: each layer's new keys and values go in at their padded places."""

    def __init__(self, cache: Any, rows: PackedRows) -> None:
        self.cache, self.rows = cache, rows

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self.rows.heads_unpacked(key_states), self.rows.heads_unpacked(value_states)
        return self.cache.update(keys, values, layer_idx, *args, **kwargs)  # type: ignore[no-any-return]


def packs(model: Any, mask: torch.Tensor) -> bool:
    """Whether a pass of ``model`` whose own positions ``mask`` marks runs packed (module doc); the caller has
    checked that no edit reads the batch's positions."""
    padded = mask.shape[1] > 1 and not bool(mask.all())
    return padded and model.config._attn_implementation == "sdpa" and packable(model)
