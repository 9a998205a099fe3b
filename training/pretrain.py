"""A short causal-LM pretraining of the tiny base on its own corpus (every token in the loss).

Real bases arrive pretrained; a random 32-layer Llama does not, and SFT with the loss on
assistant turns only sees too few supervised tokens to learn reading and copying from
scratch within the default pair's time budget. A few hundred plain language-modelling
steps on the training texts (system prompts, passages, questions and replies as plain
documents, without chat markup) give the base that knowledge; SFT then teaches the chat
format and the role behaviours with its usual prompt masking. Seeded: same corpus and
seed, same weights.

Example:
    >>> losses = pretrain_causal_lm(model, tokenizer, documents, steps=200)   # doctest: +SKIP
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any


def _encode(tokenizer: Any, documents: Sequence[str], max_length: int) -> list[list[int]]:
    end = tokenizer.convert_tokens_to_ids("<|end_of_text|>")
    bos = tokenizer.bos_token_id
    ids = tokenizer(list(documents), add_special_tokens=False)["input_ids"]
    return [([bos] + doc + [end])[:max_length] for doc in ids if doc]


def _batch(docs: list[list[int]], pad_id: int) -> tuple[Any, Any, Any]:
    """input_ids, attention_mask, labels: [B, T], right-padded, pads excluded from the loss."""
    import torch

    width = max(len(d) for d in docs)
    ids = torch.full((len(docs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(docs), width), dtype=torch.long)
    for i, doc in enumerate(docs):
        ids[i, :len(doc)] = torch.tensor(doc)
        mask[i, :len(doc)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return ids, mask, labels


def pretrain_causal_lm(model: Any, tokenizer: Any, documents: Sequence[str], *, steps: int, learning_rate: float = 2e-3,
                       batch_size: int = 16, max_length: int = 256, seed: int = 0, warmup: float = 0.05,
                       report: Callable[[int, int], None] | None = None) -> list[float]:
    """Train ``model`` in place for ``steps`` AdamW steps (warmup then cosine decay); returns the losses."""
    import torch

    docs = _encode(tokenizer, documents, max_length)
    if not docs:
        return []
    torch.manual_seed(seed)
    order_rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0, betas=(0.9, 0.95))
    warm = max(1, int(warmup * steps))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm))))
    pool: list[list[int]] = []
    losses: list[float] = []
    model.train()
    for step in range(steps):
        if len(pool) < batch_size:
            pool += order_rng.sample(docs, len(docs))
        batch, pool = pool[:batch_size], pool[batch_size:]
        ids, mask, labels = _batch(batch, tokenizer.pad_token_id)
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


def grow_depth(shallow: Any, config: Any, *, seed: int = 0) -> Any:
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
    placed = dict(zip(trained_positions(len(shallow.model.layers), config.num_hidden_layers), shallow.model.layers))
    with torch.no_grad():
        for index, layer in enumerate(grown.model.layers):
            if index in placed:
                layer.load_state_dict(placed[index].state_dict())
            else:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
    grown.generation_config = shallow.generation_config
    return grown.eval()
