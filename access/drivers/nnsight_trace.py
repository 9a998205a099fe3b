"""nnsight driver: captures with one ``trace`` per batch, edits inside ``generate``'s ``tracer.all()``.

Capture: module outputs are read in execution order (nnsight 0.8 raises ``OutOfOrderError``
otherwise): per block, attention output, down-projection input (``mlp_post``), MLP output,
block output. The reduction to one vector per prompt runs inside the trace on real tensors,
and the trace stops after the last one. Firing counts come from plain counting hooks on the
same modules, so the "fires exactly once" check does not rely on nnsight's own bookkeeping.

Edit: ``TransformersModel`` wraps the already loaded HF module (no copy). Each site function
runs inside ``tracer.all()`` so it applies at the prompt forward *and* at every decoding step
(nnsight applies an edit written outside an iteration loop to the prompt forward only). nnsight
0.8 cuts an open-ended loop short when generation stops and skips code after it, so the
generated tokens are collected *inside* the loop, one ``argmax`` of the LM head per step. That
is exactly greedy decoding when the model's generation config adds no logits processors,
which :func:`generate` checks. The site functions are the very ones the torch driver hooks in,
so both drivers compute the same edit.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import torch
from einops import rearrange

from access.batches import TokenBatch
from access.drivers.base import Collector, SiteEdits, check_distinct_modules, reduce_positions
from access.hook_points import module_for, module_path, resolve
from access.hook_table import EXECUTION_ORDER, HOOK_TABLE
from core.errors import ProbeError
from core.models import input_embedding

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from access.generation import Generations, Generator

_PROCESSOR_FIELDS = (
    "repetition_penalty",
    "no_repeat_ngram_size",
    "encoder_repetition_penalty",
    "bad_words_ids",
    "suppress_tokens",
    "begin_suppress_tokens",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "sequence_bias",
)


def wrap(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> Any:
    """An nnsight ``TransformersModel`` around ``model`` (shared weights, no copy)."""
    from nnsight.modeling.transformers import TransformersModel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TransformersModel(model, tokenizer=tokenizer, task="text-generation")


def _value(envoy: Any, is_input: bool) -> torch.Tensor:
    value = envoy.input if is_input else envoy.output
    tensor: torch.Tensor = value[0] if isinstance(value, tuple) else value
    return tensor


class NNsightBackend:
    name: str

    def __init__(
        self,
        model: PreTrainedModel,
        hooks: Sequence[str],
        layers: Sequence[int],
        position: str,
        *,
        tokenizer: PreTrainedTokenizerBase,
        model_dir: Any = None,  # noqa: ARG002 - the driver constructor's keyword, passed to every driver
    ) -> None:
        check_distinct_modules(model, hooks, layers)
        self.model, self.hooks, self.layers, self.position = model, tuple(hooks), list(layers), position
        self.lm = wrap(model, tokenizer)
        self.collector = Collector(model, hooks, layers, position)
        self.counts: dict[tuple[str, int], int] = {}

    def _tensor_of(self, hook: str, layer: int) -> Any:
        return _value(resolve(self.lm, module_path(self.model, hook, layer)), HOOK_TABLE[hook].is_input)

    def _count_hooks(self) -> list[Any]:
        handles = []
        for hook in self.hooks:
            for layer in self.layers:
                module, _ = module_for(self.model, hook, layer)

                def bump(*_: Any, key: tuple[str, int] = (hook, layer)) -> None:
                    self.counts[key] += 1

                # a pre-hook: a module called once produces its output once, and a pre-hook still
                # runs when nnsight stops the trace from inside the module's output hook
                handles.append(module.register_forward_pre_hook(bump))
        return handles

    @torch.inference_mode()
    def record(self, batch: TokenBatch) -> dict[str, torch.Tensor]:
        import nnsight

        device = input_embedding(self.model).device
        mask = batch.attention_mask.to(device)
        inputs = {
            "input_ids": batch.input_ids.to(device),
            "attention_mask": mask,
            "position_ids": batch.position_ids.to(device),
        }
        self.counts = {(h, layer): 0 for h in self.hooks for layer in self.layers}
        order = [(h, layer) for layer in self.layers for h in EXECUTION_ORDER if h in self.hooks]
        saved: list[Any] = []
        position = self.position
        reduce_mask = batch.reduce_mask.to(device)
        handles = self._count_hooks()
        try:
            with self.lm.trace(inputs) as tracer:
                for hook, layer in order:
                    x = self._tensor_of(hook, layer)
                    saved.append((x.shape[-1], nnsight.save(reduce_positions(x, reduce_mask, position))))
                tracer.stop()
        finally:
            for handle in handles:
                handle.remove()
        self.collector.reset(batch.reduce_mask)
        for (hook, layer), (width, value) in zip(order, saved, strict=True):
            self.collector.take_reduced(hook, layer, self.counts[(hook, layer)], int(width), value)
        return self.collector.result()


def check_plain_greedy(model: PreTrainedModel) -> None:
    """Refuse a generation config whose logits processors would make raw-logit argmax differ from ``generate``."""
    config = model.generation_config
    for name in _PROCESSOR_FIELDS:
        value = getattr(config, name, None)
        if value not in (None, 1.0, 0, [], {}):
            raise ProbeError(
                "the nnsight backend reads greedy tokens from raw logits, "
                f"but the model's generation config sets {name}={value!r}; use --backend torch"
            )


def generate(generator: Generator, edits: SiteEdits | None) -> Generations:
    """The generator's rows, decoded greedily through nnsight with ``edits`` applied at every forward."""
    from access.generation import cut_at_stop

    model = generator.model
    check_plain_greedy(model)
    lm = wrap(model, generator.tokenizer)  # per pass: a wrapper cached on the model would keep the model alive
    edits = edits or SiteEdits()
    start = time.perf_counter()
    result: list[list[int]] = [[] for _ in generator.prompts]
    kwargs = generator.config.generate_kwargs(generator.pad_id, generator.stop)
    with edits.around if edits.around is not None else nullcontext():
        for batch in generator.batches:
            input_ids, mask = generator.padded(batch)
            for row, sequence in zip(
                batch, _greedy_steps(lm, model, input_ids, mask, kwargs, edits).tolist(), strict=True
            ):
                result[row] = cut_at_stop(sequence, generator.stop)
    stats = edits.stats.as_dict() if edits.stats is not None else None
    return generator.decode(result, time.perf_counter() - start, stats)


def _head_path(model: PreTrainedModel) -> str:
    head = model.get_output_embeddings()
    return next(str(name) for name, module in model.named_modules() if module is head)


def _greedy_steps(
    lm: Any,
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    kwargs: dict[str, Any],
    edits: SiteEdits,
) -> torch.Tensor:
    """Greedy new tokens [batch, steps] with the site functions applied at every forward."""
    head = resolve(lm, _head_path(model))
    targets = [
        (resolve(lm, module_path(model, hook, layer)), HOOK_TABLE[hook].is_input, fn) for hook, layer, fn in edits.sites
    ]
    steps: list[torch.Tensor] = []
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        with lm.generate({"input_ids": input_ids, "attention_mask": mask}, **kwargs) as tracer:
            for _ in tracer.all():
                for envoy, is_input, fn in targets:
                    tensor = _value(envoy, is_input)
                    edited = fn(tensor)
                    if edited is not tensor:
                        tensor.copy_(edited)
                steps.append(head.output[:, -1].argmax(-1).save())
    if not steps:
        return torch.empty((input_ids.shape[0], 0), dtype=torch.long)
    return rearrange([torch.as_tensor(s) for s in steps], "step b -> b step").cpu()  # each step's [B] token ids
