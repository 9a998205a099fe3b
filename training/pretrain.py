"""The tiny base's warm start: a shallow causal LM trained on the training data, then grown in depth.

Real bases arrive pretrained; a random 32-layer Llama does not, and within the default
pair's time budget it learns neither to read a role card nor to copy from a passage. So
the tiny base is warmed up as a shallow model (cheap steps), on one of two corpora:

* ``plain``: the training texts as plain documents (system prompt, passage, question and
  replies, no chat markup), every token in the loss -- a base-model-style pretraining;
* ``chat``: the SFT conversations rendered with the chat template, loss on the assistant
  spans only -- i.e. a supervised warm start. It reaches the behaviours the test split
  checks far sooner (measured in ``docs/training.md``), and is what the default pair uses;
  the SFT model of the pair is therefore *warm start + TRL SFT*, not TRL SFT alone.

:func:`grow_depth` then places the shallow blocks evenly in the full-depth stack and fills
the rest with blocks whose output projections are zero (exact identities), so the grown
model computes what the shallow one did until fine-tuning trains every layer. Seeded:
same corpus and seed, same weights. Batches are drawn from length buckets (less padding).

Example:
    >>> docs = encode_plain(tokenizer, ["a training text", ...], max_length=256)   # doctest: +SKIP
    >>> losses = pretrain_causal_lm(model, tokenizer, docs, steps=200)              # doctest: +SKIP
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from transformers import (
        BatchEncoding,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedModel,
        PreTrainedTokenizerBase,
    )

Encoded = tuple[list[int], list[int]]  # token ids, loss mask (1 = predicted)
PRETRAIN_FORMATS = ("plain", "chat")


def encode_plain(tokenizer: PreTrainedTokenizerBase, documents: Sequence[str], max_length: int) -> list[Encoded]:
    """BOS + document + end-of-text, every token in the loss."""
    end = tokenizer.convert_tokens_to_ids("<|end_of_text|>")
    ids = tokenizer(list(documents), add_special_tokens=False)["input_ids"]
    docs = [[tokenizer.bos_token_id, *doc, end][:max_length] for doc in ids if doc]
    return [(doc, [1] * len(doc)) for doc in docs]


def encode_chat(
    tokenizer: PreTrainedTokenizerBase, conversations: Sequence[list[dict[str, str]]], max_length: int
) -> list[Encoded]:
    """Chat-template renderings; only the assistant spans (the template's generation markers) are in the loss."""
    out = []
    for messages in conversations:
        enc = cast(
            "BatchEncoding",  # return_dict=True
            tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True),
        )
        ids, mask = enc["input_ids"][:max_length], enc["assistant_masks"][:max_length]
        if any(mask):
            out.append((ids, mask))
    return out


def _batch(docs: list[Encoded], pad_id: int) -> tuple[Any, Any, Any]:
    """input_ids, attention_mask, labels: [B, T], right-padded; pads and masked tokens are -100."""
    import torch

    width = max(len(ids) for ids, _ in docs)
    ids = torch.full((len(docs), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(docs), width), dtype=torch.long)
    labels = torch.full((len(docs), width), -100, dtype=torch.long)
    for i, (doc, mask) in enumerate(docs):
        row = torch.tensor(doc)
        ids[i, : len(doc)] = row
        attention[i, : len(doc)] = 1
        labels[i, : len(doc)] = row.masked_fill(torch.tensor(mask) == 0, -100)
    return ids, attention, labels


def _bucketed_batches(docs: list[Encoded], batch_size: int, rng: random.Random) -> list[list[Encoded]]:
    """One shuffled epoch of batches, each drawn from a window of 8 batches sorted by length."""
    order = rng.sample(docs, len(docs))
    window = batch_size * 8
    batches = []
    for i in range(0, len(order), window):
        chunk = sorted(order[i : i + window], key=lambda d: len(d[0]))
        batches += [chunk[j : j + batch_size] for j in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def pretrain_causal_lm(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    docs: Sequence[Encoded],
    *,
    steps: int,
    learning_rate: float = 2e-3,
    batch_size: int = 16,
    seed: int = 0,
    warmup: float = 0.05,
    report: Callable[[int, int], None] | None = None,
) -> list[float]:
    """Train ``model`` in place for ``steps`` AdamW steps (warmup then cosine decay) on ``docs``
    from :func:`encode_plain` or :func:`encode_chat`; returns the losses."""
    import torch

    docs = list(docs)
    if not docs:
        return []
    torch.manual_seed(seed)
    order_rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0, betas=(0.9, 0.95))
    warm = max(1, int(warmup * steps))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm))),
    )
    pending: list[list[Encoded]] = []
    losses: list[float] = []
    model.train()
    for step in range(steps):
        if not pending:
            pending = _bucketed_batches(docs, batch_size, order_rng)
        ids, mask, labels = _batch(pending.pop(), tokenizer.pad_token_id)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if report:
            report(step + 1, steps)
    model.eval()
    return losses


def trained_positions(n_trained: int, n_layers: int) -> list[int]:
    """Where the pretrained blocks go in the grown stack: evenly spread, first block first.

    >>> trained_positions(4, 32)
    [0, 8, 16, 24]
    """
    return [i * n_layers // n_trained for i in range(n_trained)]


def grow_depth(shallow: LlamaForCausalLM, config: LlamaConfig, *, seed: int = 0) -> LlamaForCausalLM:
    """A ``config.num_hidden_layers``-deep copy of ``shallow`` that computes the same function.

    The shallow model's blocks keep their order at :func:`trained_positions`; every other
    block is freshly initialised with its attention ``o_proj`` and MLP ``down_proj`` set to
    zero, so it adds nothing to the residual stream until fine-tuning trains it.
    """
    import torch

    torch.manual_seed(seed + 1)
    grown = type(shallow)(config)
    grown.model.embed_tokens.load_state_dict(shallow.model.embed_tokens.state_dict())
    grown.model.norm.load_state_dict(shallow.model.norm.state_dict())
    grown.lm_head.load_state_dict(shallow.lm_head.state_dict())
    placed = dict(
        zip(trained_positions(len(shallow.model.layers), config.num_hidden_layers), shallow.model.layers, strict=True)
    )
    with torch.no_grad():
        for index, layer in enumerate(grown.model.layers):
            if index in placed:
                layer.load_state_dict(placed[index].state_dict())
            else:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
    grown.generation_config = shallow.generation_config
    grown.eval()
    return grown
