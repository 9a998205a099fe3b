"""TransformerLens backend: TransformerBridge hooks on the raw Hugging Face weights.

TransformerLens 4 removed ``HookedTransformer``; the bridge wraps the already loaded
model (``boot_transformers(dir, hf_model=..., tokenizer=...)``), so both backends see
the same weights. Compatibility mode is *not* enabled: it folds LayerNorm weights and
centres the unembedding in place, which would change the very model we record. The
bridge forces eager attention on the model it wraps (a known TL 4 behaviour), which is
slower than SDPA but numerically equivalent (about 1e-7 in float32).

Hook names are TransformerLens's own (each row of :data:`access.hook_points.HOOK_TABLE`); the
forward stops after the last recorded block (``stop_at_layer``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from einops import rearrange

from access.batches import TokenBatch
from access.drivers.base import Collector, check_distinct_modules
from access.hook_table import HOOK_TABLE
from core.errors import ProbeError
from core.models import input_embedding

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


class TransformerLensBackend:
    name: str

    def __init__(
        self,
        model: PreTrainedModel,
        hooks: Sequence[str],
        layers: Sequence[int],
        position: str,
        *,
        tokenizer: PreTrainedTokenizerBase | None = None,
        model_dir: Any = None,
    ) -> None:
        from transformer_lens.model_bridge import TransformerBridge

        if model_dir is None or tokenizer is None:
            raise ProbeError("the transformer_lens backend needs the model directory and tokenizer")
        check_distinct_modules(model, hooks, layers)
        self.hooks, self.layers, self.position = tuple(hooks), list(layers), position
        device = input_embedding(model).device
        self.bridge = TransformerBridge.boot_transformers(
            str(model_dir), hf_model=model, tokenizer=tokenizer, device=str(device)
        )
        self.device = device
        self.collector = Collector(model, hooks, layers, position)
        missing = [n for n in self._names() if n not in self.bridge.hook_dict]
        if missing:
            raise ProbeError(f"TransformerLens has no hook point {missing[0]} for this model; use --backend torch")

    def _names(self) -> list[str]:
        return [HOOK_TABLE[h].tl_name.format(i=layer) for h in self.hooks for layer in self.layers]

    def _hook(self, hook: str, layer: int) -> Any:
        def fn(x: torch.Tensor, hook: Any = None) -> None:  # noqa: ARG001 - TL calls fn(tensor, hook=HookPoint)
            # a hook point split by head ([batch, pos, head, d_head], TL's hook_z) is the table's one flat width
            self.collector.take(hook_name, layer, rearrange(x, "b p h d -> b p (h d)") if x.dim() == 4 else x)

        hook_name = hook
        return fn

    @torch.inference_mode()
    def record(self, batch: TokenBatch) -> dict[str, torch.Tensor]:
        self.collector.reset(batch.reduce_mask)
        fwd_hooks: list[tuple[str | Callable[..., Any], Callable[..., Any]]] = [
            (HOOK_TABLE[h].tl_name.format(i=layer), self._hook(h, layer)) for h in self.hooks for layer in self.layers
        ]
        self.bridge.run_with_hooks(
            batch.input_ids.to(self.device),
            fwd_hooks=fwd_hooks,
            return_type=None,
            stop_at_layer=max(self.layers) + 1,
            attention_mask=batch.attention_mask.to(self.device),
            position_ids=batch.position_ids.to(self.device),
        )
        return self.collector.result()
