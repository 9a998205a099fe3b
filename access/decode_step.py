"""Shared decoding's step: one batch of prompts decoded greedily for a chunk of passes on :class:`access.stack.Stack`.

:class:`BatchDecoder` is the loop :class:`access.shared_generation.SharedDecoder` runs per batch of prompts and
chunk of arms. Each step embeds each group's next token (:class:`access.decode_batch.DecodeBatch`), runs the blocks
below the fork layer once per group and the blocks from the fork layer up once per row (each arm's sites on its
rows: :mod:`access.shared_sites`), takes the float32 argmax of the last position's logits and forks the groups whose
rows chose differently. Before the first step, each shared stem of the batch runs once per arm and seeds every
prompt's caches (:class:`access.kv_cache.Seed`); a multi-token forward (a prompt pass) runs in slices of rows under
the token budget (:func:`access.stack.rows_within`), whose caches are joined afterwards.

Example:
    >>> logits = torch.tensor([[0.5, 2.0, 1.0], [1.0, 1.0, 1.0], [float("nan"), 0.0, 1.0]])
    >>> greedy(logits)   # each row's argmax, and whether its logits are broken (flat, or not finite)
    ([1, 0, 0], [False, True, True])
    >>> engine = BatchDecoder(Stack(model), generator, [None], Sources([None]), 2048)   # doctest: +SKIP
    >>> tokens, broken, counts = engine.decode(stem_batches(generator.prompts, 8)[0], [0], fork=0)   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from einops import rearrange, reduce
from torch.nn import functional

from access.batches import position_ids_for
from access.decode_batch import DecodeBatch
from access.joint_steps import joint_step, segments
from access.kv_cache import Seed, joined
from access.stack import Stack, rows_within
from access.stems import Stem, members
from core.chat import left_pad

if TYPE_CHECKING:
    from access.drivers.base import SiteEdits
    from access.generation import Generator
    from access.shared_sites import Sources


class BatchDecoder:
    """Greedy decoding of one batch of prompts at a time, for any chunk of ``passes`` (each chunk on its own)."""

    def __init__(
        self,
        stack: Stack,
        generator: Generator,
        passes: Sequence[SiteEdits | None],
        sources: Sources,
        max_batch_tokens: int,
    ) -> None:
        self.stack, self.generator, self.passes, self.sources = stack, generator, passes, sources
        self.max_batch_tokens = max_batch_tokens
        self.source_stacks = [Stack(model) for model in sources.models]
        self.state: DecodeBatch | None = None  # the batch running now (what the arms' site functions read)
        self.joint: list[tuple[int, DecodeBatch]] = []  # the batches of a joint step running now (segments)

    @torch.no_grad()
    def decode(self, batch: Sequence[Stem], arms: list[int], fork: int) -> Decoded:
        """Decode passes ``arms`` on one batch of prompts, the blocks below ``fork`` once per group: their tokens and
        broken-logit counts in ``arms`` order."""
        state, positions = self._prepare(batch, arms, fork)
        allow_skip = bool(state.prompt_mask.all())  # generate's own mask decision for a batch: no padding, no mask
        limit = self.generator.config.max_new_tokens
        for step in range(limit):
            group_positions = (
                positions[state.group_prompt]
                if step == 0
                else rearrange(state.last_position[state.group_prompt] + step, "g -> g 1")
            )
            chosen, bad = self._choose(self._step(state, group_positions, fork, allow_skip))
            if not state.went_on(chosen, bad, self.generator.stop, limit):
                break
        self.state = None
        return decoded(state)

    @torch.no_grad()
    def decode_together(
        self,
        batches: Sequence[Sequence[Stem]],
        arms: list[int],
        fork: int,
        finished: Callable[[int, Decoded], None],
    ) -> list[Decoded]:
        """:meth:`decode` on several batches (no pass reading a patch source): prompt passes one by one, then each step
        of all as one forward (:func:`access.joint_steps.joint_step`); ``finished`` hears each batch as it ends."""
        assert not self.sources.needed(arms), "joint steps run no patch source"
        limit = self.generator.config.max_new_tokens
        results: dict[int, Decoded] = {}

        def went_on(entry: tuple[int, DecodeBatch, bool], chosen: list[int], bad: list[bool]) -> bool:
            index, state, _ = entry
            if state.went_on(chosen, bad, self.generator.stop, limit):
                return True
            results[index] = decoded(state)
            finished(index, results[index])
            return False

        live = []
        for index, batch in enumerate(batches):
            state, positions = self._prepare(batch, arms, fork)
            allow_skip = bool(state.prompt_mask.all())
            entry = (index, state, allow_skip)
            if went_on(entry, *self._choose(self._step(state, positions, fork, allow_skip))):
                live.append(entry)
        self.state = None
        for step in range(1, limit):
            if not live:
                break
            self.joint = segments([state for _, state, _ in live])
            hidden = joint_step(self.stack, [(state, allow_skip) for _, state, allow_skip in live], step, fork)
            logits = self._last_logits(torch.cat(hidden))
            taken = [greedy(part) for part in torch.split(logits, [h.shape[0] for h in hidden])]
            live = [entry for entry, chosen in zip(live, taken, strict=True) if went_on(entry, *chosen)]
        self.joint = []
        return [results[index] for index in range(len(batches))]

    def segments(self) -> list[tuple[int, DecodeBatch]]:
        """The batches the forward running now holds, each with where its rows start in it (a prompt pass's slice
        starts at a row of its batch: a negative start)."""
        if self.joint:
            return self.joint
        assert self.state is not None, "shared decoding hooks fire only inside a batch"
        return [(-self.state.offset, self.state)]

    def _prepare(self, batch: Sequence[Stem], arms: list[int], fork: int) -> tuple[DecodeBatch, torch.Tensor]:
        """The batch's state with every prompt's remainder after its stem left-padded (its stem run and seeded), and
        the remainders' positions."""
        prompts = [self.generator.prompts[i] for i in members(batch)]
        shared = [stem for stem in batch if stem.length]
        stem_of: list[int] = []  # per prompt: its stem among ``shared`` (-1: none)
        for stem in batch:
            stem_of += [shared.index(stem) if stem.length else -1] * len(stem.members)
        lengths = [stem.length for stem in batch for _ in stem.members]
        input_ids, mask = left_pad(
            [p[n:] for p, n in zip(prompts, lengths, strict=True)], self.generator.pad_id, self.generator.device
        )
        positions = position_ids_for(mask) + rearrange(torch.tensor(lengths, device=mask.device), "p -> p 1") * mask
        last = torch.tensor([len(p) - 1 for p in prompts], device=mask.device)
        state = self.state = DecodeBatch.start(arms, input_ids, mask, last, self.sources.needed(arms))
        if shared:
            self._run_stems(state, shared, stem_of, fork)
        return state, positions

    def _choose(self, hidden: torch.Tensor) -> tuple[list[int], list[bool]]:
        """:func:`greedy` on :meth:`_last_logits`."""
        return greedy(self._last_logits(hidden))

    def _last_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The float32 logits of each row's last position."""
        return self.stack.logits(hidden[:, -1:])[:, -1].to(torch.float32)

    def _step(self, state: DecodeBatch, group_positions: torch.Tensor, fork: int, allow_skip: bool) -> torch.Tensor:
        """One forward of every row (the groups' next tokens): the top block's output, a row per row."""
        self._run_sources(state, group_positions, allow_skip)
        hidden = self.stack.embed(state.group_input)
        hidden, state.lower = self._blocks(
            state, self.stack, hidden, range(fork), state.group_prompt, group_positions, state.lower, allow_skip
        )
        state.row_group_index = torch.tensor(state.row_group, device=hidden.device)
        hidden = hidden.index_select(0, state.row_group_index)
        row_positions = group_positions.index_select(0, state.row_group_index)
        hidden, state.upper = self._blocks(
            state,
            self.stack,
            hidden,
            range(fork, self.stack.total),
            state.row_prompt,
            row_positions,
            state.upper,
            allow_skip,
        )
        return hidden

    def _run_stems(self, state: DecodeBatch, shared: list[Stem], stem_of: list[int], fork: int) -> None:
        """Run each shared stem once per arm, and seed ``state``'s caches with them: each prompt's rows start from its
        stem's keys and values (a prompt with no stem from padding), its mask from the stem's."""
        prompts = self.generator.prompts
        ids, mask = left_pad(
            [prompts[stem.members[0]][: stem.length] for stem in shared],
            self.generator.pad_id,
            state.prompt_mask.device,
        )
        n_stems = len(shared)
        stems = self.state = DecodeBatch.start(
            state.arms, ids, mask, mask.new_zeros(n_stems), self.sources.needed(state.arms)
        )
        self._step(stems, position_ids_for(mask), fork, bool(mask.all()))
        self.state = state
        state.counts = stems.counts  # what the site functions saw on the stems is this batch's
        per_row = [stem + (arm * n_stems if stem >= 0 else 0) for arm in range(len(state.arms)) for stem in stem_of]
        state.lower = Seed.of(stems.lower, range(fork), stem_of)
        state.upper = Seed.of(stems.upper, range(fork, self.stack.total), per_row)
        state.sources = [
            Seed.of(cache, range(top + 1), stem_of) for cache, top in zip(stems.sources, self.sources.tops, strict=True)
        ]
        seen = mask.index_select(0, torch.tensor([max(k, 0) for k in stem_of], device=mask.device))
        seen = seen * rearrange(torch.tensor([k >= 0 for k in stem_of], device=mask.device), "p -> p 1")
        state.prompt_mask = torch.cat([seen.to(state.prompt_mask.dtype), state.prompt_mask], dim=1)

    def _run_sources(self, state: DecodeBatch, positions: torch.Tensor, allow_skip: bool) -> None:
        """Each patch source on the groups' tokens, up to its highest site;
        its values there are kept for the patch arms."""
        if not state.sources:
            state.sources = [None] * len(self.source_stacks)
        for k, (stack, top) in enumerate(zip(self.source_stacks, self.sources.tops, strict=True)):
            if k not in state.source_needed:
                continue
            self.sources.reset(k)
            hidden = stack.embed(state.group_input)
            _, state.sources[k] = self._blocks(
                state, stack, hidden, range(top + 1), state.group_prompt, positions, state.sources[k], allow_skip
            )
            self.sources.join(k)

    def _blocks(
        self,
        state: DecodeBatch,
        stack: Stack,
        hidden: torch.Tensor,
        layers: range,
        row_prompt: list[int],
        positions: torch.Tensor,
        cache: Any,
        allow_skip: bool,
    ) -> tuple[torch.Tensor, Any]:
        """Run ``layers`` of ``stack`` on ``hidden`` (rows of prompts ``row_prompt``) with ``cache``; a prompt pass (no
        cache yet, or one seeded with stems) runs in budgeted slices of rows."""
        if not layers:
            return hidden, cache
        if cache is not None and not isinstance(cache, Seed):
            return self._forward(state, stack, hidden, layers, row_prompt, positions, cache, allow_skip), cache
        rows, reserve = hidden.shape[0], self.generator.config.max_new_tokens
        step = rows_within(self.max_batch_tokens, hidden.shape[1])
        if step >= rows and cache is None:
            cache = stack.new_cache(reserve)
            return self._forward(state, stack, hidden, layers, row_prompt, positions, cache, allow_skip), cache
        parts, caches = [], []
        seed = state.prompt_mask.shape[1] - hidden.shape[1]  # the stems' positions before the remainders'
        edited = not self._unedited(state)
        trims = [0] * len(range(0, rows, step)) if edited else trims_of(state, row_prompt, hidden.shape[1], step)
        for start, trim in zip(range(0, rows, step), trims, strict=True):
            part = slice(start, start + step)
            caches.append(cache.take(part, stack.new_cache()) if cache is not None else stack.new_cache())
            out = self._forward(
                state,
                stack,
                hidden[part, trim:],
                layers,
                row_prompt[part],
                positions[part, trim:],
                caches[-1],
                allow_skip,
                start,
                slice(seed, seed + trim),
            )
            parts.append(functional.pad(out, (0, 0, trim, 0)))
        return torch.cat(parts), joined(caches, layers, stack.new_cache(reserve), seed, trims)

    def _unedited(self, state: DecodeBatch) -> bool:
        """Whether no pass of ``state`` edits and none reads a patch source: no site function sees the batch's
        positions, so a prompt pass may leave padding out (:func:`trims_of`, :mod:`access.packed_rows`)."""
        return not state.source_needed and all(self.passes[arm] is None for arm in state.arms)

    def _forward(
        self,
        state: DecodeBatch,
        stack: Stack,
        hidden: torch.Tensor,
        layers: range,
        row_prompt: list[int],
        positions: torch.Tensor,
        cache: Any,
        allow_skip: bool,
        offset: int = 0,
        left_out: slice = slice(0, 0),
    ) -> torch.Tensor:
        """One forward of ``layers``; ``offset``: the first of the batch's rows in ``hidden`` (for the edits);
        ``left_out``: the mask's positions that ``hidden`` leaves out (padding only)."""
        mask_2d = state.prompt_mask.index_select(0, torch.tensor(row_prompt, device=hidden.device))
        if left_out.stop > left_out.start:
            mask_2d = torch.cat([mask_2d[:, : left_out.start], mask_2d[:, left_out.stop :]], dim=1)
        state.offset = offset
        packed = self._unedited(state)
        hidden, _ = stack.blocks(hidden, layers, mask_2d, positions, cache, allow_skip=allow_skip, packed=packed)
        return hidden


def trims_of(state: DecodeBatch, row_prompt: list[int], length: int, step: int) -> list[int]:
    """Per slice of ``step`` rows of a prompt pass, the leading positions that pad every row of it: left out of its
    forward where no pass edits (:meth:`BatchDecoder._unedited`; an edit's site sees the batch's positions)."""
    tail = state.prompt_mask[:, state.prompt_mask.shape[1] - length :]
    # per prompt: its leading padding
    padding = reduce((tail.cumsum(dim=1) == 0).long(), "p t -> p", "sum").tolist()
    return [min(padding[p] for p in row_prompt[start : start + step]) for start in range(0, len(row_prompt), step)]


# per pass (its place in the arms decoded): the tokens per prompt, its broken logits, what its site functions saw
Decoded = tuple[list[list[list[int]]], list[int], list[dict[str, int]]]


def decoded(state: DecodeBatch) -> Decoded:
    """What ``state``'s passes decoded, in its arms' order, the site counts read off the device."""
    counts = [{k: int(v) for k, v in state.counts.get(arm, {}).items()} for arm in state.arms]
    return state.tokens, state.broken, counts


def greedy(logits: torch.Tensor) -> tuple[list[int], list[bool]]:
    """Each row's argmax of ``logits`` ``[rows, vocab]``, and whether the row is broken (an inf or NaN, or every logit
    equal)."""
    flat = reduce(logits, "r v -> r", "max") == reduce(logits, "r v -> r", "min")
    bad = (reduce(~torch.isfinite(logits), "r v -> r", "any") | flat).tolist()
    return logits.argmax(-1).tolist(), bad
