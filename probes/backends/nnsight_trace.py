"""nnsight backend: one ``trace`` per batch over the same Hugging Face modules.

Module outputs are read in execution order (nnsight 0.8 raises ``OutOfOrderError``
otherwise): per block, attention output, down-projection input (``mlp_post``), MLP
output, block output. The reduction to one vector per prompt runs inside the trace on
real tensors, and the trace stops after the last one. Firing counts come from plain
counting hooks on the same modules, so the "fires exactly once" check does not rely
on nnsight's own bookkeeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from probes.backends.base import EXECUTION_ORDER, Collector, check_distinct_modules
from probes.hook_points import architecture_of, module_for
from probes.prompts import Batch


def _envoy(root: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        root = getattr(root, part)
    return root


class NNsightBackend:
    name = "nnsight"

    def __init__(self, model: Any, hooks: Sequence[str], layers: Sequence[int], position: str, *, tokenizer: Any) -> None:
        from nnsight.modeling.transformers import TransformersModel

        check_distinct_modules(model, hooks, layers)
        self.model, self.hooks, self.layers, self.position = model, tuple(hooks), list(layers), position
        self.lm = TransformersModel(model, tokenizer=tokenizer)
        self.arch = architecture_of(model)
        self.collector = Collector(model, hooks, layers, position)
        self.counts: dict[tuple[str, int], int] = {}

    def _tensor_of(self, hook: str, layer: int) -> Any:
        block = _envoy(self.lm, self.arch.layers)[layer]
        if hook == "mlp_post":
            return _envoy(_envoy(block, self.arch.mlp), self.arch.down_proj).input
        module = block if hook == "resid_post" else _envoy(block, self.arch.attention if hook == "attn_out" else self.arch.mlp)
        out = module.output
        return out[0] if isinstance(out, tuple) else out

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
    def record(self, batch: Batch) -> dict[str, torch.Tensor]:
        from probes.backends.base import reduce_positions

        device = self.model.get_input_embeddings().weight.device
        mask = batch.attention_mask.to(device)
        inputs = {"input_ids": batch.input_ids.to(device), "attention_mask": mask, "position_ids": batch.position_ids.to(device)}
        self.counts = {(h, layer): 0 for h in self.hooks for layer in self.layers}
        order = [(h, layer) for layer in self.layers for h in EXECUTION_ORDER if h in self.hooks]
        saved: list[Any] = []
        position = self.position
        handles = self._count_hooks()
        try:
            with self.lm.trace(inputs) as tracer:
                for hook, layer in order:
                    x = self._tensor_of(hook, layer)
                    saved.append((x.shape[-1], reduce_positions(x, mask, position).save()))
                tracer.stop()
        finally:
            for handle in handles:
                handle.remove()
        self.collector.reset(batch.attention_mask)
        for (hook, layer), (width, value) in zip(order, saved):
            self.collector.take_reduced(hook, layer, self.counts[(hook, layer)], int(width), value)
        return self.collector.result()
