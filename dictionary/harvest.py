"""Harvest: both models' activations at one layer and hook, every kept token of the text mix, into the store.

Each model runs only up to the hook point it is read at (its base model, no LM head: a hook at the site raises to
end the forward, as :mod:`access.lockstep` stops a source), on left-padded batches with position ids counted from
each row's first token, so a sequence's values are the same alone or in any batch. The plan (sequences sorted by
length, packed into batches of at most ``max_batch_tokens`` padded tokens, batches grouped into shards of about
``shard_tokens`` activations) depends only on the text and the settings, so a resumed harvest writes the same shards.
Under torchrun each process writes the shards whose index it owns (:class:`probes.distributed.World`); rank 0 checks
that every shard is there.

Example:
    >>> plan = plan_shards([3, 2, 5, 4], max_batch_tokens=8, shard_tokens=4)
    >>> [[b for b in shard] for shard in plan]
    [[[1, 0], [3]], [[2]]]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from access.batches import position_ids_for
from access.hook_points import attach
from core.errors import ProbeError
from dictionary.store import ShardData, Store
from dictionary.text import TextMix

if TYPE_CHECKING:
    from transformers import PreTrainedModel

FLOAT16_MAX = float(np.finfo(np.float16).max)


class _Reached(Exception):
    """Raised at the hook point to end a forward that has given what it was run for."""


def plan_shards(lengths: Sequence[int], max_batch_tokens: int, shard_tokens: int) -> list[list[list[int]]]:
    """Shards of batches of sequence indices: sequences by length (stable), batches of at most ``max_batch_tokens``
    padded tokens (a longer sequence alone), shards closed once they hold ``shard_tokens`` kept activations."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    for i in order:
        last = batches[-1] if batches else None
        if last is not None and (len(last) + 1) * lengths[i] <= max_batch_tokens:
            last.append(i)
        else:
            batches.append([i])
    shards: list[list[list[int]]] = [[]]
    held = 0
    for batch in batches:
        if held >= shard_tokens:
            shards.append([])
            held = 0
        shards[-1].append(batch)
        held += sum(lengths[i] - 1 for i in batch)  # an upper bound on the kept activations
    return [s for s in shards if s]


def site_values(model: PreTrainedModel, hook: str, layer: int, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, T, width]`` float32 values of ``hook`` at ``layer`` on a left-padded batch; the model runs up to there."""
    captured: dict[str, torch.Tensor] = {}

    def keep(x: torch.Tensor) -> None:
        captured["x"] = x.detach().float()
        raise _Reached

    device = next(model.parameters()).device
    handle = attach(model, hook, layer, keep)
    try:
        with torch.no_grad():
            model.base_model(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                position_ids=position_ids_for(mask).to(device),
                use_cache=False,
            )
    except _Reached:
        pass
    finally:
        handle.remove()
    if "x" not in captured:
        raise ProbeError(f"{hook} at layer {layer} did not fire in the forward (the model does not fit the hook table)")
    return captured["x"].cpu()


def left_padded(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, length - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        mask[row, length - len(seq) :] = 1
    return ids, mask


@dataclass(frozen=True)
class Site:
    hook: str
    layer: int


def harvest_batch(
    models: tuple[PreTrainedModel, PreTrainedModel], site: Site, mix: TextMix, batch: list[int], pad_id: int
) -> ShardData:
    """Both models on one batch of sequences: every kept token's SFT value and DPO − SFT difference (a sequence's
    positions from its ``start`` on)."""
    ids, mask = left_padded([mix.sequences[i].ids for i in batch], pad_id)
    sft, dpo = (site_values(m, site.hook, site.layer, ids, mask) for m in models)
    starts = torch.tensor([mix.sequences[i].start for i in batch])[:, None]
    keep = (mask.bool() & (position_ids_for(mask) >= starts)).reshape(-1)
    sft_kept, dpo_kept = sft.reshape(-1, sft.shape[-1])[keep], dpo.reshape(-1, dpo.shape[-1])[keep]
    if not (torch.isfinite(sft_kept).all() and torch.isfinite(dpo_kept).all()):
        raise ProbeError(f"{site.hook} layer {site.layer}: the models produced NaN or inf activations")
    if max(float(sft_kept.abs().max()), float((dpo_kept - sft_kept).abs().max())) > FLOAT16_MAX:
        raise ProbeError(f"{site.hook} layer {site.layer}: activations exceed float16's range; pick another site")
    rows = torch.arange(len(batch))[:, None].expand_as(mask).reshape(-1)[keep]
    sequence = torch.tensor(batch, dtype=torch.int32)[rows]
    return ShardData(
        sft=sft_kept.numpy().astype(np.float16),
        diff=(dpo_kept - sft_kept).numpy().astype(np.float16),
        tokens=ids.reshape(-1)[keep].numpy().astype(np.int32),
        sequence=sequence.numpy(),
        position=position_ids_for(mask).reshape(-1)[keep].numpy().astype(np.int32),
        held_out=np.asarray([mix.sequences[int(i)].held_out for i in sequence], dtype=bool),
    )


def join(parts: list[ShardData]) -> ShardData:
    return ShardData(*(np.concatenate([getattr(p, name) for p in parts]) for name in ShardData.__dataclass_fields__))


@dataclass
class HarvestReport:
    shards: int
    written: int
    resumed: int
    seconds: float


def pending_shards(store: Store, n_shards: int, owns: Callable[[int], bool] = lambda _: True) -> list[int]:
    """The shards this process owns that the store lacks (a damaged or foreign one is removed and counted here)."""
    store.remove_temporaries()
    return [index for index in range(n_shards) if owns(index) and not store.sealed(index)]


def harvest(
    store: Store,
    models: tuple[PreTrainedModel, PreTrainedModel],
    site: Site,
    mix: TextMix,
    plan: list[list[list[int]]],
    pad_id: int,
    pending: list[int],
    progress: Any = None,
) -> HarvestReport:
    """Write the ``pending`` shards of ``plan``; ``progress.update(tokens)`` after each batch."""
    started = time.perf_counter()
    for index in pending:
        parts = []
        for batch in plan[index]:
            parts.append(harvest_batch(models, site, mix, batch, pad_id))
            if progress is not None:
                progress.update(sum(mix.sequences[i].kept for i in batch))
        store.write(index, join(parts))
    return HarvestReport(len(plan), len(pending), len(plan) - len(pending), time.perf_counter() - started)
