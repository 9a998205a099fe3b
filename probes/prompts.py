"""Turn a capability's test rows into token ids, exactly as the models saw them in training.

Rendering is :func:`core.chat.encode_conversations`, the one every stage uses: roles
lowercased (the published RoleMRC test file writes ``System``/``User``), the model's own
chat template with nothing added in front of its first token, and no generation prompt
unless asked (the paper recorded the prompt as is, so the last token is the final user
turn's end-of-turn token).

Prompts are ordered by token length (stable, ties keep file order) before batching:
left padding then wastes almost nothing, and the order is a pure function of the data
and tokenizer, which is what makes resuming deterministic. ``sample_ids`` keep each
row's index in the data file, so nothing is lost by the reordering.

Example:
    >>> from probes.samples import SampleColumns
    >>> samples = SampleColumns([7, 3], ["t", "t"], [2, 3], ["<a>", "<b>"])   # data rows 7 and 3, shortest first
    >>> batch = make_batch(PromptSet("multi_turn", samples, ids=[[5, 6], [7, 8, 9]]), [0, 1], pad_id=0)
    >>> batch.input_ids.tolist(), batch.position_ids.tolist(), batch.samples.sample_ids.tolist()
    ([[0, 5, 6], [7, 8, 9]], [[0, 0, 1], [0, 1, 2]], [7, 3])
    >>> prompts = build_prompts(tokenizer, rows, Capability.MULTI_TURN, add_generation_prompt=False)  # doctest: +SKIP
    >>> prompts.samples.prompts[0].startswith("<|im_start|>system")                                  # doctest: +SKIP
    True
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import torch

from access.batches import TokenBatch, position_ids_for
from core.capabilities import Capability
from core.chat import check_context, decode_text, encode_conversations, left_pad
from core.rows import group_by_capability, row_location
from core.schema import TestRow
from probes.samples import SampleColumns

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class PromptSet:
    """One capability's prompts in recording order: their sample columns and token ids."""

    capability: str
    samples: SampleColumns
    ids: list[list[int]]  # token ids as the chat template renders them
    response_lengths: list[int] | None = (
        None  # teacher-forced response tokens at the end of each sequence (probes.responses)
    )

    def __len__(self) -> int:
        return len(self.samples)


def build_prompts(
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[TestRow],
    capability: Capability,
    *,
    add_generation_prompt: bool,
    source: str | os.PathLike[str] | None = None,
    max_tokens: int | None = None,
    response: Callable[[int], str] | None = None,
) -> PromptSet:
    """``source``, the data file ``rows`` came from, lets a refused row be named by file and line; a prompt longer
    than ``max_tokens`` (the model's context) is refused. ``response(row_index)``: teacher-force that text after each
    prompt as the assistant's turn (:func:`probes.responses.teacher_forced`; ``add_generation_prompt`` is then moot)."""
    members = group_by_capability(rows, [capability])[capability]

    def where(i: int) -> str:
        return row_location(members[i][0], source)

    lengths: list[int] | None = None
    if response is None:
        ids = encode_conversations(
            tokenizer, [row.question for _, row in members], add_generation_prompt=add_generation_prompt, where=where
        )
    else:
        from probes.responses import teacher_forced

        forced = [
            teacher_forced(tokenizer, row.question, response(index), partial(where, k))
            for k, (index, row) in enumerate(members)
        ]
        ids, lengths = [f[0] for f in forced], [f[1] for f in forced]
    check_context(ids, max_tokens, where)
    order = sorted(range(len(members)), key=lambda i: len(ids[i]))
    samples = SampleColumns(
        sample_ids=np.array([members[i][0] for i in order], dtype=np.int64),
        tasks=[members[i][1].task for i in order],
        prompt_lengths=np.array([len(ids[i]) for i in order], dtype=np.int32),
        prompts=[decode_text(tokenizer, ids[i]) for i in order],
    )
    return PromptSet(
        capability=capability.value,
        samples=samples,
        ids=[ids[i] for i in order],
        response_lengths=None if lengths is None else [lengths[i] for i in order],
    )


@dataclass(frozen=True, kw_only=True)
class Batch(TokenBatch):
    """A left-padded batch: positions ``start..start+len`` of one PromptSet."""

    capability: str
    start: int
    samples: SampleColumns

    def __len__(self) -> int:
        return len(self.samples)


def make_batch(prompts: PromptSet, positions: Sequence[int], pad_id: int) -> Batch:
    """The prompts at ``positions`` (ascending), left-padded; ``start`` is the first position."""
    ids = [prompts.ids[p] for p in positions]
    input_ids, mask = left_pad(ids, pad_id)
    response_mask = None
    if prompts.response_lengths is not None:
        response_mask = torch.zeros_like(mask)
        for row, p in enumerate(positions):  # left-padded: the response is the last tokens of each row
            response_mask[row, mask.shape[1] - prompts.response_lengths[p] :] = 1
    return Batch(
        capability=prompts.capability,
        start=positions[0],
        samples=prompts.samples.take(positions),
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=position_ids_for(mask),
        response_mask=response_mask,
    )
