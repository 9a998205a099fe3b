"""A/B generation: the core generation path with an intervention as its hook context.

A/B evaluation only means something if the two arms differ by the intervention alone:
same prompts, same rendering, same batches, same decoding. All of that is
:class:`core.generation.Generator`'s; :class:`ABGenerator` adds the intervention. Two
backends apply the scaling:

* ``torch`` (default): :func:`interventions.scaling.scaled_units` as the generator's hook context.
* ``nnsight``: ``TransformersModel.generate`` with the edit inside ``tracer.all()`` so it
  applies at every step; tokens are read per step from the LM head (greedy only), over the
  generator's own batches and stop tokens.

Example:
    >>> gen = ABGenerator(model, tokenizer, rows, GenerationConfig(max_new_tokens=32))   # doctest: +SKIP
    >>> base = gen.run()                                                                  # doctest: +SKIP
    >>> abl = gen.run(Intervention(neurons, 0.0))                                        # doctest: +SKIP
    >>> sum(a != b for a, b in zip(base.ids, abl.ids))   # rows changed  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from analysis.neuron_sets import NeuronSet
from core.errors import ProbeError
from core.generation import GenerationConfig, Generations, Generator, cut_at_stop
from core.schema import TestRow
from interventions.scaling import scaled_units, validate_factor
from interventions.selection import check_against_model
from probes.hook_points import module_for

BACKENDS: tuple[str, ...] = ("torch", "nnsight")


@dataclass(frozen=True)
class Intervention:
    """Scale ``neurons`` by ``factor`` at every forward pass."""

    neurons: NeuronSet
    factor: float

    def __post_init__(self) -> None:
        validate_factor(self.factor)


class ABGenerator:
    """Generate responses for fixed rows, repeatably, with or without an intervention."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, rows: Sequence[TestRow],
                 config: GenerationConfig = GenerationConfig(), backend: str = "torch",
                 where: Callable[[int], str] | None = None) -> None:
        """``where(i)`` names row ``i`` in rendering errors (default: its index in ``rows``)."""
        if backend not in BACKENDS:
            raise ProbeError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
        if backend == "nnsight" and config.do_sample:
            raise ProbeError("the nnsight backend decodes greedily only; use --backend torch for seeded sampling")
        self.model, self.backend = model, backend
        self.generator = Generator(model, tokenizer, [r.question for r in rows], config, where)
        self._lm: Any = None

    def run(self, intervention: Intervention | None = None) -> Generations:
        """Generate every row once; ``intervention=None`` is the baseline arm. ``hook_stats["degenerate_logits"]``
        counts the forward positions whose logits were broken (see :class:`LogitWatch`)."""
        if intervention is not None:
            check_against_model(intervention.neurons, self.model)
        with watch_logits(self.model) as watch:
            try:
                generations = self._generate(intervention)
            except RuntimeError as exc:
                if watch.count == 0:
                    raise
                factor = intervention.factor if intervention is not None else 1.0
                raise ProbeError(f"factor {factor!r} broke the model's logits (inf/NaN), so sampling failed "
                                 f"({str(exc).splitlines()[0]}); use a factor of moderate size") from None
        generations.hook_stats = {**(generations.hook_stats or {}), "degenerate_logits": watch.count}
        return generations

    def _generate(self, intervention: Intervention | None) -> Generations:
        if self.backend == "nnsight":
            start = time.perf_counter()
            return self.generator.decode(self._run_nnsight(intervention), time.perf_counter() - start)
        if intervention is None:
            return self.generator.run()
        return self.generator.run(scaled_units(self.model, intervention.neurons, intervention.factor))

    def _run_nnsight(self, intervention: Intervention | None) -> list[list[int]]:
        from interventions.nnsight_backend import generate_greedy, wrap

        gen = self.generator
        if self._lm is None:
            self._lm = wrap(self.model, gen.tokenizer)
        result: list[list[int]] = [[] for _ in gen.prompts]
        kwargs = gen.config.generate_kwargs(gen.pad_id, gen.stop)
        for batch in gen.batches:
            input_ids, mask = gen.padded(batch)
            steps = generate_greedy(self._lm, self.model, input_ids, mask, kwargs, intervention)
            for row, sequence in zip(batch, steps.tolist()):
                result[row] = cut_at_stop(sequence, gen.stop)
        return result


class LogitWatch:
    """Counts forward positions whose logits are broken: an inf or NaN, or the same value for every token.

    A factor so large that the scaled units overflow breaks the model in one of two ways:
    in float16 the product is inf and NaN spreads to the logits; in float32/bfloat16 the
    next RMSNorm squares it to inf, scales the whole hidden state by 1/sqrt(inf) = 0 and
    every logit becomes 0. A healthy language model produces neither, so either one marks
    the arm's generations as degenerate. Counted on the model's device, read once at the end.
    """

    def __init__(self) -> None:
        self._bad: torch.Tensor | int = 0

    def add(self, logits: torch.Tensor) -> None:
        broken = (~torch.isfinite(logits)).any(-1) | (logits.amax(-1) == logits.amin(-1))
        self._bad = self._bad + broken.sum()

    @property
    def count(self) -> int:
        return int(self._bad)


@contextmanager
def watch_logits(model: PreTrainedModel) -> Iterator[LogitWatch]:
    """Within the block, every output of the model's LM head is checked (:class:`LogitWatch`)."""
    watch = LogitWatch()
    head = model.get_output_embeddings()
    handle = head.register_forward_hook(lambda _m, _i, out: watch.add(out[0] if isinstance(out, tuple) else out))
    try:
        yield watch
    finally:
        handle.remove()


def edit_locations(model: PreTrainedModel, intervention: Intervention) -> list[tuple[str, bool, torch.Tensor]]:
    """(module path, is_input, unit index) per layer, for backends that address modules by name."""
    names = {module: name for name, module in model.named_modules()}
    out: list[tuple[str, bool, torch.Tensor]] = []
    for layer, units in sorted(intervention.neurons.by_layer().items()):
        module, is_input = module_for(model, intervention.neurons.hook, layer)
        out.append((names[module], is_input, torch.tensor(sorted(units), dtype=torch.long)))
    return out
