"""Shared decoding's joint steps: the decode steps of several batches of prompts run as one forward.

A decode step on a CPU reads every weight whatever its rows, so a batch pays that read at each of its steps: the
evaluation's 162 held-out rows in five batches of prompts paid it about five times 64 times per model.
:func:`joint_step` runs one step of several batches (each a :class:`access.decode_batch.DecodeBatch` with its own
caches, padding, mask, groups and arms) as one forward: every matrix product, norm and activation on all their rows
at once (the blocks below the fork layer on their groups), and attention per batch, over that batch's own keys and
values with its own mask (:class:`BatchCaches`). The weights are read once a step for all of them, and no batch
attends over another's padding; the passes' site functions run on each batch's rows in turn (:func:`segments`).
Passes that read a patch source do not step together (their source keeps one batch's values at a time).

Each batch's attention is the call, on the same tensors, that its own step makes (the model's attention function,
``sdpa`` or ``eager``, through the mask the model's ``create_causal_mask`` builds for it), so its rows see exactly
what they would see alone; the products run on more rows, whose rounding CPU kernels may change (the same caveat as
a batch's own row count, :mod:`access.shared_generation`).

Example:
    >>> from transformers import DynamicCache
    >>> caches = BatchCaches([DynamicCache(), DynamicCache()], rows=[2, 1], masks=[None, None], attention="sdpa")
    >>> keys = torch.zeros(3, 1, 1, 4)   # a layer's new keys for three rows: two of one batch, one of the other
    >>> _ = caches.update(keys, keys, 0)
    >>> [tuple(k.shape) for k, _ in caches.current]   # each batch's cache got its own rows
    [(2, 1, 1, 4), (1, 1, 1, 4)]
    >>> hidden = joint_step(stack, [(state, allow_skip), (other, other_allow)], 3, fork)   # doctest: +SKIP
    >>> [h.shape[0] for h in hidden]   # each batch's rows, in its own row order   # doctest: +SKIP
    [64, 60]
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from einops import rearrange

from access.attention import attention_as, walk_name
from access.stack import walk

if TYPE_CHECKING:
    from access.decode_batch import DecodeBatch
    from access.stack import Stack

JOINT_ATTENTION = "probe_joint"  # the attention implementation a joint step runs under, and the keyword it reads


class BatchCaches:
    """Several batches' caches as one: a layer's new keys and values go to each batch's cache, its rows in turn, and
    the attention of that layer reads each batch's whole keys and values (:func:`joint_attention`)."""

    def __init__(self, caches: Sequence[Any], rows: list[int], masks: list[Any], attention: str) -> None:
        self.caches, self.rows, self.masks, self.attention = caches, rows, masks, attention
        self.current: list[tuple[torch.Tensor, torch.Tensor]] = []

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.current = [
            cache.update(keys, values, layer_idx)
            for cache, keys, values in zip(
                self.caches, torch.split(key_states, self.rows), torch.split(value_states, self.rows), strict=True
            )
        ]
        return key_states, value_states


def joint_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,  # noqa: ARG001 - transformers' attention signature
    value: torch.Tensor,  # noqa: ARG001
    attention_mask: torch.Tensor | None,  # noqa: ARG001
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Each batch's rows of ``query`` attend over that batch's keys and values, through the model's own attention
    function and the batch's own mask; ``key``, ``value`` and ``attention_mask`` (the joint rows') are not read."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    caches: BatchCaches = kwargs.pop(JOINT_ATTENTION)
    family_eager = sys.modules[type(module).__module__].eager_attention_forward
    inner = ALL_ATTENTION_FUNCTIONS.get_interface(caches.attention, family_eager)
    outputs = [
        inner(module, rows, keys, values, mask, **kwargs)[0]
        for rows, (keys, values), mask in zip(
            torch.split(query, caches.rows), caches.current, caches.masks, strict=True
        )
    ]
    return torch.cat(outputs), None


@functools.cache
def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(JOINT_ATTENTION, joint_attention)


def joint_step(stack: Stack, batches: Sequence[tuple[DecodeBatch, bool]], step: int, fork: int) -> list[torch.Tensor]:
    """Decode step ``step`` (1 or more: after the prompt pass) of ``batches`` (each with whether its mask may be
    skipped): the blocks below ``fork`` on all their groups at once, the rest on all their rows at once; the top
    block's output per batch, a row per row. The passes' site functions run on each batch's rows in turn
    (:func:`segments`)."""
    _register()
    group_positions = [rearrange(state.last_position[state.group_prompt] + step, "g -> g 1") for state, _ in batches]
    hidden = stack.embed(torch.cat([state.group_input for state, _ in batches]))
    if fork:
        hidden = _blocks(stack, hidden, range(fork), batches, group_positions, lower=True)
    groups = [len(state.group_prompt) for state, _ in batches]
    rows, positions = [], []
    for part, where, (state, _) in zip(torch.split(hidden, groups), group_positions, batches, strict=True):
        state.row_group_index = torch.tensor(state.row_group, device=part.device)
        rows.append(part.index_select(0, state.row_group_index))
        positions.append(where.index_select(0, state.row_group_index))
    hidden = torch.cat(rows)
    if fork < stack.total:
        hidden = _blocks(stack, hidden, range(fork, stack.total), batches, positions, lower=False)
    return list(torch.split(hidden, [len(state.row_group) for state, _ in batches]))


def segments(batches: Sequence[DecodeBatch]) -> list[tuple[int, DecodeBatch]]:
    """Where each batch's rows start in a joint step's rows (what the passes' site functions read)."""
    starts = itertools.accumulate((len(state.row_group) for state in batches), initial=0)
    return list(zip(starts, batches, strict=False))


def _blocks(
    stack: Stack,
    hidden: torch.Tensor,
    layers: range,
    batches: Sequence[tuple[DecodeBatch, bool]],
    positions: list[torch.Tensor],
    *,
    lower: bool,
) -> torch.Tensor:
    """``layers`` on every batch's groups (``lower``: the blocks below the fork, a row per group, and their cache) or
    rows (the rest), attention per batch over its own cache with its own mask."""
    from transformers.masking_utils import create_causal_mask

    config = stack.model.config
    caches = [state.lower if lower else state.upper for state, _ in batches]
    prompts = [state.group_prompt if lower else state.row_prompt for state, _ in batches]
    sizes = [len(p) for p in prompts]
    masks = [
        create_causal_mask(
            config=config,
            inputs_embeds=part,
            attention_mask=state.prompt_mask.index_select(0, torch.tensor(prompt, device=part.device)),
            past_key_values=cache,
            position_ids=where,
            layer_idx=layers.start,
            allow_is_causal_skip=allow_skip,
        )
        for (state, allow_skip), prompt, cache, where, part in zip(
            batches, prompts, caches, positions, torch.split(hidden, sizes), strict=True
        )
    ]
    joint = BatchCaches(caches, sizes, masks, walk_name(config._attn_implementation))
    with attention_as(config, JOINT_ATTENTION):
        return walk(stack.decoder, hidden, layers, None, torch.cat(positions), joint, extra={JOINT_ATTENTION: joint})
