"""Teacher-forced passes that compute once what the arms share: the prompt, the blocks below the edits, patch sources.

:class:`access.outcomes.Outcomes` teacher-forces fixed sequences (a prompt and a response) through a model once per
arm. On the default pair most of a sequence is its prompt (about 150 of 175 tokens), each prompt comes with two
responses (the target's greedy one and the reference), and an arm's edits start in the upper half of the model.
This module runs a batch of sequences the way that costs least and gives every arm the same arithmetic:

* **prompts once.** A batch is a few prompts (left-padded) and all their responses (right-padded). Each block runs
  the prompts, keeps their keys and values, and runs the responses over them (each response row sees its own
  prompt's keys and values): a prompt shared by a row's KL sequence and its reference sequence, or by a DPO pair's
  chosen and rejected replies, runs once.
* **from the fork layer up.** The unedited pass keeps the hidden states entering each block an arm needs to start
  at (its *fork layer*: the lowest block its sites touch); the arm runs from there. Blocks below it compute exactly
  the unedited values, so they are not run again.
* **patch sources once per batch.** A patch's source model sees the same fixed tokens whatever the arm, so it runs
  once per batch up to the highest patched block, and every patch arm and placebo set reads its units' values from
  that one pass (:class:`SourceValues`).

An arm runs the blocks from its fork layer on exactly the tensors the unedited pass gave those blocks, in the same
batches, so an arm whose edits change no value reproduces the unedited outputs bit for bit. Against a plain
``transformers`` forward of each whole sequence the outputs differ only by float rounding (other kernels and batch
shapes; tested to 1e-5 on log-probs and KL in ``tests/test_access_outcomes.py``).

It walks the decoder on :class:`access.stack.Stack` (:class:`ForcedStack`), so it runs the models the stack runs
(:func:`access.stack.supports`); other architectures use the per-arm engine, :class:`access.forced.WholeForwards`.
:class:`access.forced_shared.SharedForcing` runs the arms over these passes.

Example:
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
    ...                      num_attention_heads=2, num_key_value_heads=1)
    >>> _ = torch.manual_seed(0); model = LlamaForCausalLM(config).eval()
    >>> seqs = [((1, 5, 7), (9, 3)), ((1, 5, 7), (4,)), ((1, 4), (8, 2))]   # (prompt, response)
    >>> batches = prompt_batches(seqs, max_batch_tokens=64, batch_size=8)
    >>> [b.seqs for b in batches]
    [[2, 0, 1]]
    >>> stack = ForcedStack(model)
    >>> out, _ = stack.run(batches[0], stack.embed_batch(batches[0]), range(2))
    >>> [tuple(x.shape) for x in stack.response_hidden(batches[0], out)]   # one vector per response token
    [(2, 16), (2, 16), (1, 16)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from access.hook_points import attach
from access.stack import Stack, packed

if TYPE_CHECKING:
    from access.drivers.base import SiteEdits
    from access.lockstep import Lockstep

Phase = Callable[[str], None]  # told "prompt" or "response" before each half of a pass
Seq = tuple[tuple[int, ...], tuple[int, ...]]  # (prompt, response)


@dataclass
class PromptBatch:
    """Prompts (left-padded) and their responses (right-padded); response row ``r`` continues prompt
    ``response_prompt[r]`` and is sequence ``seqs[r]`` of the caller's list."""

    seqs: list[int]
    n_response: list[int]
    prompt_ids: torch.Tensor  # [P, Tp]
    prompt_mask: torch.Tensor  # [P, Tp]
    response_ids: torch.Tensor  # [R, Tr]
    response_mask: torch.Tensor  # [R, Tr]
    response_prompt: torch.Tensor  # [R]

    @property
    def prompt_positions(self) -> torch.Tensor:
        return (self.prompt_mask.cumsum(-1) - 1).clamp(min=0)

    @property
    def response_positions(self) -> torch.Tensor:
        start = self.prompt_mask.sum(-1).index_select(0, self.response_prompt)
        return start[:, None] + torch.arange(self.response_ids.shape[1])[None, :]

    @property
    def full_response_mask(self) -> torch.Tensor:
        """[R, Tp + Tr]: each response row's prompt (its padding hidden) then its own tokens."""
        return torch.cat([self.prompt_mask.index_select(0, self.response_prompt), self.response_mask], dim=1)

    def n_tokens(self) -> int:
        """Padded tokens, prompts and responses."""
        return int(self.prompt_ids.numel() + self.response_ids.numel())


def prompt_batches(seqs: Sequence[Seq], max_batch_tokens: int, batch_size: int) -> list[PromptBatch]:
    """``(prompt, response)`` sequences grouped by prompt and packed, shortest prompts first, into batches of at most
    ``batch_size`` responses and ``max_batch_tokens`` padded tokens (a prompt with more gets a batch of its own)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (prompt, _) in enumerate(seqs):
        groups.setdefault(prompt, []).append(i)

    def size(prompts: list[tuple[int, ...]]) -> tuple[int, int]:
        members = [i for p in prompts for i in groups[p]]
        tokens = len(prompts) * max(len(p) for p in prompts) + len(members) * max(len(seqs[i][1]) for i in members)
        return len(members), tokens

    order = sorted(groups, key=lambda p: (len(p), groups[p][0]))
    return [_batch(chosen, groups, seqs) for chosen in packed(order, size, max_batch_tokens, batch_size)]


def _batch(
    prompts: list[tuple[int, ...]],
    groups: dict[tuple[int, ...], list[int]],
    seqs: Sequence[Seq],
) -> PromptBatch:
    tp = max(len(p) for p in prompts)
    members = [(k, i) for k, p in enumerate(prompts) for i in groups[p]]
    prompt_ids, prompt_mask = torch.zeros(len(prompts), tp, dtype=torch.long), torch.zeros(len(prompts), tp).long()
    for k, p in enumerate(prompts):
        prompt_ids[k, tp - len(p) :], prompt_mask[k, tp - len(p) :] = torch.tensor(p), 1
    response_ids, response_mask = _right_padded([seqs[i][1] for _, i in members])
    return PromptBatch(
        seqs=[i for _, i in members],
        n_response=[len(seqs[i][1]) for _, i in members],
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=response_ids,
        response_mask=response_mask,
        response_prompt=torch.tensor([k for k, _ in members], dtype=torch.long),
    )


def _right_padded(responses: Sequence[tuple[int, ...]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``responses`` as ids and mask ``[R, longest]``, each padded on the right."""
    width = max(map(len, responses))
    ids, mask = torch.zeros(len(responses), width, dtype=torch.long), torch.zeros(len(responses), width).long()
    for r, response in enumerate(responses):
        ids[r, : len(response)], mask[r, : len(response)] = torch.tensor(response), 1
    return ids, mask


def judged_batch(batch: PromptBatch, unique: Sequence[Seq], judged: Sequence[Seq]) -> PromptBatch | None:
    """The ``judged`` sequences whose prompt ``batch`` runs (``unique``: the sequences its ``seqs`` index), as responses
    over the same prompts (their ``seqs`` index ``judged``); None where there are none."""
    row_of = {unique[i][0]: int(k) for i, k in zip(batch.seqs, batch.response_prompt.tolist(), strict=True)}
    members = [(row_of[prompt], j) for j, (prompt, _) in enumerate(judged) if prompt in row_of]
    if not members:
        return None
    response_ids, response_mask = _right_padded([judged[j][1] for _, j in members])
    return PromptBatch(
        seqs=[j for _, j in members],
        n_response=[len(judged[j][1]) for _, j in members],
        prompt_ids=batch.prompt_ids,
        prompt_mask=batch.prompt_mask,
        response_ids=response_ids,
        response_mask=response_mask,
        response_prompt=torch.tensor([k for k, _ in members], dtype=torch.long),
    )


@dataclass
class Hidden:
    """The hidden states of a batch at one point of the stack: the prompts' ``[P, Tp, d]``, the responses'
    ``[R, Tr, d]`` (and a judged batch's responses', where the pass ran one)."""

    prompt: torch.Tensor
    response: torch.Tensor
    judged: torch.Tensor | None = None


class ForcedStack(Stack):
    """One model's decoder stack, run block range by block range on a :class:`PromptBatch`."""

    def embed_batch(self, batch: PromptBatch) -> Hidden:
        return Hidden(self.embed(batch.prompt_ids.to(self.device)), self.embed(batch.response_ids.to(self.device)))

    def run(
        self,
        batch: PromptBatch,
        hidden: Hidden,
        layers: range,
        keep: Sequence[int] = (),
        phase: Phase | None = None,
        judged: PromptBatch | None = None,
    ) -> tuple[Hidden, dict[int, Hidden]]:
        """``layers`` on ``hidden`` (what enters ``layers.start``): the prompts with a cache of their own, then the
        responses over it; and for each block of ``keep`` in ``layers`` (or just above them), what entered it.
        ``judged`` (:func:`judged_batch`, whole passes only): more responses run over the same prompt cache after
        ``batch``'s own (phase ``judged``), which leaves ``batch``'s values as they are without them."""
        cache = self.new_cache()
        if phase is not None:
            phase("prompt")
        prompt, kept_prompt = self._blocks(
            hidden.prompt, layers, batch.prompt_mask, batch.prompt_positions, cache, keep
        )
        if phase is not None:
            phase("response")
        response, kept_response = self._responses(batch, hidden.response, layers, cache, keep)
        out = Hidden(prompt, response)
        if judged is not None:
            assert layers.start == 0, "a judged batch runs in whole passes only"
            if phase is not None:
                phase("judged")
            out.judged = self._responses(judged, self.embed(judged.response_ids.to(self.device)), layers, cache, ())[0]
        return out, {i: Hidden(kept_prompt[i], kept_response[i]) for i in kept_prompt}

    def _responses(
        self, batch: PromptBatch, hidden: torch.Tensor, layers: range, cache: Any, keep: Sequence[int]
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """``batch``'s responses through ``layers``, each row over its prompt's keys and values in ``cache``."""
        expanded = self.new_cache()
        index = batch.response_prompt.to(self.device)
        for i in layers:
            layer: Any = cache.layers[i]
            expanded.update(layer.keys.index_select(0, index), layer.values.index_select(0, index), i)
        return self._blocks(hidden, layers, batch.full_response_mask, batch.response_positions, expanded, keep)

    def _blocks(
        self,
        hidden: torch.Tensor,
        layers: range,
        mask_2d: torch.Tensor,
        positions: torch.Tensor,
        cache: Any,
        keep: Sequence[int],
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        return self.blocks(
            hidden, layers, mask_2d.to(self.device), positions.to(self.device), cache, allow_skip=False, keep=keep
        )

    def response_hidden(self, batch: PromptBatch, out: Hidden) -> list[torch.Tensor]:
        """Per response row, the final normed hidden states (the LM head's input) at the positions that predict its
        tokens: its prompt's last one, then its own but the last, ``[n_response, d]``."""
        last = out.prompt[:, -1]
        rows = []
        for r, n in enumerate(batch.n_response):
            first = last[int(batch.response_prompt[r])][None]
            rows.append(self.norm(torch.cat([first, out.response[r, : n - 1]])))
        return rows


@dataclass
class SourceValues:
    """A patch source's values on one batch: the whole hook-point tensor at every site some arm patches, from one pass
    of the source up to its highest patched block; :meth:`fill` gives a patch's lockstep its units' values."""

    stack: ForcedStack
    sites: set[tuple[str, int]]
    values: dict[str, dict[tuple[str, int], torch.Tensor]] = field(default_factory=dict)

    @torch.no_grad()
    def compute(self, batch: PromptBatch, *, whole: bool = False, judged: PromptBatch | None = None) -> Hidden:
        """Run the source on ``batch`` and keep its values at :attr:`sites`, for the prompts and the responses; the
        blocks up to the highest site, or every block (``whole``, which may run ``judged`` too:
        :meth:`ForcedStack.run`); returns what the last block run gave."""
        self.values = {"prompt": {}, "response": {}, "judged": {}}
        current = {"phase": "prompt"}

        def keep(site: tuple[str, int]) -> Callable[[torch.Tensor], None]:
            def fn(x: torch.Tensor) -> None:
                self.values[current["phase"]][site] = x.detach().clone()

            return fn

        handles = [attach(self.stack.model, hook, layer, keep((hook, layer))) for hook, layer in self.sites]
        try:
            top = self.stack.total - 1 if whole else max(layer for _, layer in self.sites)
            out, _ = self.stack.run(
                batch,
                self.stack.embed_batch(batch),
                range(top + 1),
                phase=lambda p: current.update(phase=p),
                judged=judged if whole else None,
            )
            return out
        finally:
            for handle in handles:
                handle.remove()

    def fill(self, lockstep: Lockstep, phase: str) -> None:
        """Put the values of ``lockstep``'s units, for ``phase``, where its patch's site functions read them."""
        lockstep.values = {
            site: self.values[phase][site].index_select(-1, units.to(self.values[phase][site].device))
            for site, units in lockstep.sites.items()
        }


def fork_layer(edits: SiteEdits, stack: Stack) -> int:
    """The lowest block ``edits`` touch (``stack.total``: none). A weight blend touches the lowest block holding a
    parameter it blends, or block 0 where it blends one outside the blocks (the embeddings, the final norm, the head:
    the arm then runs its whole stack). A logit-difference edit changes no hidden state. Any other context but a
    patch's lockstep could act anywhere: block 0."""
    from access.amplify import AmplifiedLogits, WeightBlend
    from access.lockstep import Lockstep

    sites = min((layer for _, layer, _ in edits.sites), default=stack.total)
    if edits.around is None or isinstance(edits.around, Lockstep | AmplifiedLogits):  # the latter edits only logits
        return sites
    if not isinstance(edits.around, WeightBlend):
        return 0
    return min(sites, edits.around.lowest_block(stack))
