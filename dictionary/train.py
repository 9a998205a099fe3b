"""Training a dictionary on the store's training tokens: Adam, BatchTopK, AuxK, a shuffle buffer over shards.

What the dictionary reads (:data:`KINDS`): the crosscoder ``[sft, dpo]``, the diff-SAE ``[dpo − sft]``, and the null
crosscoder ``[sft, sft]`` (the same training on SFT against itself: whatever it calls model-specific is noise, the
baseline of the real count). The recipe follows the published BatchTopK trainers (``dictionary_learning``'s
crosscoder trainer; diffing-toolkit's ``crosscoder.yaml``): Adam, learning rate ``2e-4 / sqrt(F / 2^14)`` with a
linear warm-up over the first 5% of steps and a linear decay over the last 20%, AuxK with ``d / 2`` dead latents, a
latent dead once it has not fired for :data:`DEAD_TOKENS` training tokens. The diff-SAE's decoder rows are kept at
unit norm after each step (an SAE's convention); the crosscoder's are free, since their norms are what it reports.

Tokens are read shard by shard in a seeded order and shuffled within a buffer of :data:`BUFFER_SHARDS` shards, so
memory holds a few shards, never the store. Everything is seeded: the same store and settings give the same
dictionary.

Example:
    >>> learning_rate(16384), round(learning_rate(2304), 6)
    (0.0002, 0.000533)
    >>> [round(schedule(s, 100), 2) for s in (0, 4, 50, 90, 99)]
    [0.2, 1.0, 1.0, 0.5, 0.05]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dictionary.coders import Coder, scales, training_loss
from dictionary.store import ShardData, Store

KINDS: tuple[str, ...] = ("crosscoder", "diff-sae", "null")
BUFFER_SHARDS = 8
DEAD_TOKENS = 500_000
SCALE_SAMPLE = 65_536  # tokens that fix the input scales


def inputs_of(kind: str, data: ShardData, rows: np.ndarray | None = None) -> torch.Tensor:
    """The dictionary's input ``[n, inputs, d]`` for ``kind`` from a shard (``rows``: only those)."""
    sft = data.sft if rows is None else data.sft[rows]
    diff = data.diff if rows is None else data.diff[rows]
    s = torch.from_numpy(sft.astype(np.float32))
    if kind == "diff-sae":
        return torch.from_numpy(diff.astype(np.float32))[:, None, :]
    if kind == "null":
        return torch.stack([s, s], dim=1)
    return torch.stack([s, s + torch.from_numpy(diff.astype(np.float32))], dim=1)


def learning_rate(latents: int) -> float:
    return 2e-4 / math.sqrt(latents / 2**14)


def schedule(step: int, steps: int) -> float:
    """The learning-rate factor at ``step`` of ``steps``: warm-up over 5%, decay over the last 20%."""
    warm = max(1, int(0.05 * steps))
    decay = int(0.8 * steps)
    if step < warm:
        return (step + 1) / warm
    if step >= decay:
        return max(0.0, (steps - step) / max(1, steps - decay))
    return 1.0


@dataclass(frozen=True)
class TrainSettings:
    kind: str
    latents: int
    k: int
    batch_size: int = 2048
    epochs: int = 1
    seed: int = 0


def batches(
    store: Store, kind: str, shards: list[int], batch_size: int, epochs: int, seed: int
) -> Iterator[torch.Tensor]:
    """Training batches: each epoch the shards in a seeded order, tokens shuffled within a buffer of shards."""
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = list(rng.permutation(shards))
        for start in range(0, len(order), BUFFER_SHARDS):
            parts = []
            for index in order[start : start + BUFFER_SHARDS]:
                data = store.read(int(index))
                parts.append(inputs_of(kind, data, np.flatnonzero(~data.held_out)))
            if not parts:
                continue
            pool = torch.cat(parts)
            pool = pool[torch.from_numpy(rng.permutation(len(pool)))]
            for b in range(0, len(pool) - batch_size + 1, batch_size):
                yield pool[b : b + batch_size]


def fit_scales(store: Store, kind: str, shards: list[int]) -> torch.Tensor:
    parts, held = [], 0
    for index in shards:
        data = store.read(index)
        part = inputs_of(kind, data, np.flatnonzero(~data.held_out))
        parts.append(part)
        held += len(part)
        if held >= SCALE_SAMPLE:
            break
    return scales(torch.cat(parts)[:SCALE_SAMPLE])


def train(
    store: Store,
    shards: list[int],
    settings: TrainSettings,
    n_train: int,
    progress: Callable[[int], Any] | None = None,
) -> Coder:
    """A dictionary trained on the store's ``n_train`` training tokens; ``progress(n)`` after each step of ``n``
    tokens."""
    torch.manual_seed(settings.seed)
    kind = settings.kind
    first = store.read(shards[0])
    inputs = 1 if kind == "diff-sae" else 2
    coder = Coder(inputs, first.sft.shape[1], settings.latents, settings.k, seed=settings.seed)
    coder.scale.copy_(fit_scales(store, kind, shards))
    steps = max(1, settings.epochs * (n_train // settings.batch_size))
    optimizer = torch.optim.Adam(coder.parameters(), lr=learning_rate(settings.latents), betas=(0.9, 0.999))
    lr_schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: schedule(s, steps))
    since_fired = torch.zeros(settings.latents, dtype=torch.long)
    aux_k = first.sft.shape[1] // 2
    for x in batches(store, kind, shards, settings.batch_size, settings.epochs, settings.seed):
        dead = since_fired > DEAD_TOKENS
        loss, f = training_loss(coder, x, dead, aux_k)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]  # torch's stub leaves it untyped
        optimizer.step()
        lr_schedule.step()
        if kind == "diff-sae":
            with torch.no_grad():
                coder.decoder.div_(coder.decoder.norm(dim=-1, keepdim=True).clamp_min(1e-8))
        fired = (f > 0).any(0)
        since_fired = torch.where(fired, torch.zeros_like(since_fired), since_fired + len(x))
        if progress is not None:
            progress(len(x))
    return coder
