"""How every stage generates: evaluation, A/B runs and notebooks render, batch, stop and seed through one Generator.

A response must not depend on which stage produced it, and an A/B comparison only means
something if its arms differ by the intervention alone. :class:`Generator` fixes all of
that once for a list of conversations and then runs any number of times:

* rendering: :func:`core.chat.encode_conversations` with the generation prompt;
* batching: prompts sorted by token length (stable), left-padded, ``batch_size`` a batch;
* stopping: every end-of-turn id, the tokenizer's EOS and the generation config's
  (:func:`stop_ids`); a response is cut at the first of them;
* decoding: greedy, or sampling re-seeded with ``seed + batch number`` before each
  batch, so every run (and every arm) draws the same random stream;
* interventions: ``run(context)`` enters ``context`` (e.g. forward hooks that scale units)
  around the whole generation and leaves it in ``finally``.

:class:`Generator` decodes with ``model.generate``. :mod:`access.shared_generation` decodes the same
prompts, batches and stop tokens greedily with its own loop, to run many edited arms at once (and
finished rows leave its batches); on supported architectures its tokens equal ``generate``'s.

Example:
    >>> prompts = [row.question for row in rows]  # doctest: +SKIP
    >>> gen = Generator(model, tokenizer, prompts, GenerationConfig(max_new_tokens=32))  # doctest: +SKIP
    >>> baseline = gen.run()  # doctest: +SKIP
    >>> cut_at_stop([5, 6, 4, 9], [4])
    [5, 6]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from core.chat import (
    Messages,
    Turn,
    check_context,
    context_length,
    decode_text,
    encode_conversations,
    left_pad,
    pad_id_of,
)
from core.clock import GENERATION, timed
from core.decoding import GenerationConfig
from core.errors import ProbeError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class Generations:
    """One run: new token ids and decoded text per conversation (input order), plus what the hooks saw."""

    ids: list[list[int]]
    texts: list[str]
    seconds: float
    hook_stats: dict[str, int] | None = None

    @property
    def n_tokens(self) -> int:
        return sum(len(i) for i in self.ids)


def stop_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Every token that ends a response: the tokenizer's EOS, the generation config's, and the chat template's
    end-of-turn token (Qwen2-base-style tokenizers end turns with ``<|im_end|>`` while their EOS is
    ``<|endoftext|>``)."""
    from core.templates import turn_end_token

    ids: list[int] = []
    configured = getattr(model.generation_config, "eos_token_id", None)
    end = turn_end_token(tokenizer)
    turn_end = tokenizer.convert_tokens_to_ids(end) if end else None
    for value in (tokenizer.eos_token_id, *(configured if isinstance(configured, list) else [configured]), turn_end):
        if value is not None and int(value) not in ids:
            ids.append(int(value))
    if not ids:
        raise ProbeError(
            "the model has no end-of-sequence token (tokenizer or generation config); cannot tell where a response ends"
        )
    return ids


def cut_at_stop(sequence: Sequence[int], stop: Sequence[int]) -> list[int]:
    """Tokens before the first stop token."""
    out: list[int] = []
    for token in sequence:
        if token in stop:
            break
        out.append(int(token))
    return out


class Generator:
    """Generate responses to fixed conversations, repeatably, with or without a hook context."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        conversations: Sequence[Sequence[Turn] | Messages],
        config: GenerationConfig = GenerationConfig(),
        where: Callable[[int], str] | None = None,
    ) -> None:
        """``where(i)`` names conversation ``i`` in rendering errors (default ``"row i"``,
        its index in ``conversations``)."""
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.pad_id = pad_id_of(tokenizer)
        self.stop = stop_ids(model, tokenizer)
        where = where or (lambda i: f"row {i}")
        self.prompts = encode_conversations(tokenizer, conversations, add_generation_prompt=True, where=where)
        check_context(self.prompts, context_length(model.config), where, extra=config.max_new_tokens)
        order = sorted(range(len(self.prompts)), key=lambda i: len(self.prompts[i]))
        self.batches = [order[s : s + config.batch_size] for s in range(0, len(order), config.batch_size)]

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def padded(self, batch: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids and attention_mask of one batch of prompt indices, on the model's device."""
        return left_pad([self.prompts[i] for i in batch], self.pad_id, self.device)

    def decode(self, ids: list[list[int]], seconds: float, hook_stats: dict[str, int] | None = None) -> Generations:
        texts = [decode_text(self.tokenizer, i, skip_special_tokens=True).strip() for i in ids]
        return Generations(ids, texts, seconds, hook_stats)

    @timed(GENERATION)
    @torch.no_grad()
    def token_ids(self) -> list[list[int]]:
        """New token ids per conversation, cut at the first stop token."""
        result: list[list[int]] = [[] for _ in self.prompts]
        kwargs = self.config.generate_kwargs(self.pad_id, self.stop)
        for number, batch in enumerate(self.batches):
            input_ids, mask = self.padded(batch)
            if self.config.do_sample:
                torch.manual_seed(self.config.seed + number)  # the same stream in every run
            # PreTrainedModel's type lacks GenerationMixin, which every causal LM mixes in
            out = self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)  # type: ignore[operator]
            for row, sequence in zip(batch, out[:, input_ids.shape[1] :].tolist(), strict=True):
                result[row] = cut_at_stop(sequence, self.stop)
        return result

    def run(self, context: AbstractContextManager[Any] | None = None) -> Generations:
        """Generate every conversation once inside ``context``; its ``as_dict()`` (if any) becomes ``hook_stats``."""
        start = time.perf_counter()
        with context if context is not None else nullcontext() as entered:
            ids = self.token_ids()
        as_dict = getattr(entered, "as_dict", None)
        stats = as_dict() if as_dict is not None else None
        return self.decode(ids, time.perf_counter() - start, stats)


def generate_responses(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    conversations: Sequence[Sequence[Turn] | Messages],
    config: GenerationConfig = GenerationConfig(),
    where: Callable[[int], str] | None = None,
) -> list[str]:
    """Responses to each conversation, in input order (a :class:`Generator` run once)."""
    return Generator(model, tokenizer, conversations, config, where).run().texts
