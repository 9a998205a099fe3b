"""Batched generation of the same prompts with and without an intervention.

A/B evaluation only means something if the two arms differ by the intervention alone:
same prompts, same rendering (``training.generation.encode_prompts``: lowercased roles,
generation prompt, one BOS), same batches (sorted by length, left-padded), same decoding
(greedy, or sampling re-seeded identically per batch). :class:`ABGenerator` fixes all
of that once and then runs any number of arms, returning the new token ids of each row
(cut at the first end-of-turn token) so "did a single token change?" is an exact test.

Two backends apply the scaling:

* ``torch`` (default): :func:`interventions.scaling.scaled_units` around ``model.generate``.
* ``nnsight``: ``TransformersModel.generate`` with the edit inside ``tracer.all()`` so it
  applies at every step; tokens are read per step from the LM head (greedy only).

Example:
    >>> gen = ABGenerator(model, tokenizer, rows, GenerationConfig(max_new_tokens=32))   # doctest: +SKIP
    >>> base = gen.run()                                                                  # doctest: +SKIP
    >>> abl = gen.run(Intervention(neurons, 0.0))                                        # doctest: +SKIP
    >>> sum(a != b for a, b in zip(base.ids, abl.ids))   # rows changed  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from analysis.neuron_sets import NeuronSet
from core.errors import ProbeError
from data_synthesis.schema import TestRow
from interventions.scaling import scaled_units, validate_factor
from interventions.selection import check_against_model
from probes.hook_points import module_for
from training.generation import GenerationConfig, encode_prompts, left_pad

BACKENDS: tuple[str, ...] = ("torch", "nnsight")


@dataclass(frozen=True)
class Intervention:
    """Scale ``neurons`` by ``factor`` at every forward pass."""

    neurons: NeuronSet
    factor: float

    def __post_init__(self) -> None:
        validate_factor(self.factor)


@dataclass
class Generations:
    """One arm: new token ids and decoded text per row (row order), plus what the hooks saw."""

    ids: list[list[int]]
    texts: list[str]
    seconds: float
    hook_stats: dict[str, int] | None = None

    @property
    def n_tokens(self) -> int:
        return sum(len(i) for i in self.ids)


def eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Every token that ends a response: the tokenizer's EOS and the generation config's."""
    ids: list[int] = []
    configured = getattr(model.generation_config, "eos_token_id", None)
    for value in (tokenizer.eos_token_id, *(configured if isinstance(configured, list) else [configured])):
        if value is not None and int(value) not in ids:
            ids.append(int(value))
    return ids


def cut_at_eos(sequence: Sequence[int], stop: Sequence[int]) -> list[int]:
    """Tokens before the first stop token.

    >>> cut_at_eos([5, 6, 4, 9], [4])
    [5, 6]
    """
    out: list[int] = []
    for token in sequence:
        if token in stop:
            break
        out.append(int(token))
    return out


class ABGenerator:
    """Generate responses for fixed rows, repeatably, with or without an intervention."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, rows: Sequence[TestRow],
                 config: GenerationConfig = GenerationConfig(), backend: str = "torch") -> None:
        if backend not in BACKENDS:
            raise ProbeError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
        if backend == "nnsight" and config.do_sample:
            raise ProbeError("the nnsight backend decodes greedily only; use --backend torch for seeded sampling")
        self.model, self.tokenizer, self.config, self.backend = model, tokenizer, config, backend
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.stop = eos_ids(model, tokenizer)
        self.prompts = encode_prompts(tokenizer, [r.question for r in rows], add_generation_prompt=True)
        order = sorted(range(len(self.prompts)), key=lambda i: len(self.prompts[i]))
        self.batches = [order[s:s + config.batch_size] for s in range(0, len(order), config.batch_size)]
        self._lm: Any = None

    def run(self, intervention: Intervention | None = None) -> Generations:
        """Generate every row once; ``intervention=None`` is the baseline arm."""
        if intervention is not None:
            check_against_model(intervention.neurons, self.model)
        start = time.perf_counter()
        if self.backend == "nnsight":
            ids = self._run_nnsight(intervention)
            stats = None
        elif intervention is None:
            ids, stats = self._run_torch(), None
        else:
            with scaled_units(self.model, intervention.neurons, intervention.factor) as scale:
                ids = self._run_torch()
            stats = scale.as_dict()
        texts = [self.tokenizer.decode(i, skip_special_tokens=True).strip() for i in ids]
        return Generations(ids, texts, time.perf_counter() - start, stats)

    def _kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(max_new_tokens=self.config.max_new_tokens, pad_token_id=self.pad_id, eos_token_id=self.stop)
        if self.config.do_sample:
            kwargs.update(do_sample=True, temperature=self.config.temperature, top_p=self.config.top_p)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        return kwargs

    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def _run_torch(self) -> list[list[int]]:
        result: list[list[int]] = [[] for _ in self.prompts]
        for number, index in enumerate(self.batches):
            input_ids, mask = left_pad([self.prompts[i] for i in index], self.pad_id, self._device())
            if self.config.do_sample:
                torch.manual_seed(self.config.seed + number)  # same stream in every arm
            out = self.model.generate(input_ids=input_ids, attention_mask=mask, **self._kwargs())
            for row, sequence in zip(index, out[:, input_ids.shape[1]:].tolist()):
                result[row] = cut_at_eos(sequence, self.stop)
        return result

    def _run_nnsight(self, intervention: Intervention | None) -> list[list[int]]:
        from interventions.nnsight_backend import generate_greedy, wrap

        if self._lm is None:
            self._lm = wrap(self.model, self.tokenizer)
        result: list[list[int]] = [[] for _ in self.prompts]
        for index in self.batches:
            input_ids, mask = left_pad([self.prompts[i] for i in index], self.pad_id, self._device())
            steps = generate_greedy(self._lm, self.model, input_ids, mask, self._kwargs(), intervention)
            for row, sequence in zip(index, steps.tolist()):
                result[row] = cut_at_eos(sequence, self.stop)
        return result


def edit_locations(model: PreTrainedModel, intervention: Intervention) -> list[tuple[str, bool, torch.Tensor]]:
    """(module path, is_input, unit index) per layer, for backends that address modules by name."""
    names = {module: name for name, module in model.named_modules()}
    out: list[tuple[str, bool, torch.Tensor]] = []
    for layer, units in sorted(intervention.neurons.by_layer().items()):
        module, is_input = module_for(model, intervention.neurons.hook, layer)
        out.append((names[module], is_input, torch.tensor(sorted(units), dtype=torch.long)))
    return out
