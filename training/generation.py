"""Batched chat generation for evaluation: the same rendering everywhere.

Prompts are rendered with the model's own chat template after lowercasing roles,
with the generation prompt (``<|start_header_id|>assistant...``) and exactly one BOS,
left-padded so a batch decodes together. Only the new tokens are decoded. Training
evaluation, A/B interventions and the notebooks all call :func:`generate_responses`,
so a response never depends on which stage produced it. Hooks attached to the model
(see :mod:`probes.hook_points`) act at every forward of ``generate``.

Example:
    >>> responses = generate_responses(model, tokenizer, rows, max_new_tokens=48)   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from core.errors import ProbeError
from data_synthesis.schema import TestRow, Turn


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 64
    batch_size: int = 16
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ProbeError(f"--max-new-tokens must be at least 1, got {self.max_new_tokens}")
        if self.batch_size < 1:
            raise ProbeError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.do_sample and self.temperature <= 0:
            raise ProbeError(f"--temperature must be positive when sampling, got {self.temperature}")


def render_messages(turns: Sequence[Turn]) -> list[dict[str, str]]:
    return [{"role": t.role.lower(), "content": t.content} for t in turns]


def encode_prompts(tokenizer: PreTrainedTokenizerBase, conversations: Sequence[Sequence[Turn]], *, add_generation_prompt: bool) -> list[list[int]]:
    """Token ids of each rendered conversation, with exactly one BOS."""
    encoded: list[list[int]] = []
    for turns in conversations:
        ids = tokenizer.apply_chat_template(render_messages(turns), add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=True)["input_ids"]
        bos = tokenizer.bos_token_id
        while bos is not None and len(ids) > 1 and ids[0] == bos and ids[1] == bos:
            ids = ids[1:]
        encoded.append(list(ids))
    return encoded


def left_pad(batch: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids [B, T] and attention_mask [B, T], padded on the left."""
    width = max(len(ids) for ids in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, ids in enumerate(batch):
        input_ids[i, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        mask[i, width - len(ids):] = 1
    return input_ids.to(device), mask.to(device)


@torch.no_grad()
def generate_responses(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[TestRow],
    config: GenerationConfig = GenerationConfig(),
) -> list[str]:
    """Greedy (or seeded sampled) responses to each row's question, in row order."""
    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompts = encode_prompts(tokenizer, [r.question for r in rows], add_generation_prompt=True)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths batch together
    responses: list[str] = [""] * len(prompts)
    generator_seed = config.seed
    for start in range(0, len(order), config.batch_size):
        index = order[start:start + config.batch_size]
        input_ids, mask = left_pad([prompts[i] for i in index], pad_id, device)
        kwargs: dict[str, object] = dict(max_new_tokens=config.max_new_tokens, pad_token_id=pad_id, eos_token_id=tokenizer.eos_token_id)
        if config.do_sample:
            torch.manual_seed(generator_seed + start)
            kwargs.update(do_sample=True, temperature=config.temperature, top_p=config.top_p)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        out = model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
        for row_index, sequence in zip(index, out[:, input_ids.shape[1]:]):
            responses[row_index] = tokenizer.decode(sequence, skip_special_tokens=True).strip()
    return responses


@torch.no_grad()
def generate_token_ids(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[TestRow],
    config: GenerationConfig = GenerationConfig(),
) -> list[list[int]]:
    """Like :func:`generate_responses` but returns the new token ids (for exact change detection)."""
    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompts = encode_prompts(tokenizer, [r.question for r in rows], add_generation_prompt=True)
    result: list[list[int]] = []
    for start in range(0, len(prompts), config.batch_size):
        input_ids, mask = left_pad(prompts[start:start + config.batch_size], pad_id, device)
        out = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=config.max_new_tokens, do_sample=False,
                             temperature=None, top_p=None, top_k=None, pad_token_id=pad_id, eos_token_id=tokenizer.eos_token_id)
        for sequence in out[:, input_ids.shape[1]:]:
            ids = sequence.tolist()
            while ids and ids[-1] == pad_id:
                ids.pop()
            result.append(ids)
    return result
