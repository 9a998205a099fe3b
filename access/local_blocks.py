"""Local (input-controlled) values: one model's block *l* run on the other model's input to block *l*.

Comparing SFT and DPO on the same prompt mixes two things at every layer: what the layer's own
weights do differently, and what flows into it from the layers below, which differ too. Running
DPO's block *l* on SFT's residual stream entering block *l* removes the second: the only
difference left between that value and SFT's own is block *l*'s weights. :class:`LocalRecorder`
records exactly that, for every recorded hook point and layer, in the same forward pass that
records the *source* model: a forward pre-hook on each of the source's blocks hands the block's
input (hidden states and every keyword the model passes, rotary embeddings and masks included)
to the *other* model's block of the same index, run alone with the caches removed
(:func:`access.stack.run_block_alone`), and keeps the other block's hook point values, reduced
to one vector per prompt as the recorder reduces them. The other block stops as soon as its last
requested hook point has fired (``attn_out`` never runs the MLP, ``mlp_post`` never runs the
down-projection), and the source's forward is not changed.

The directions (``dpo_on_sft``: DPO's blocks on SFT's inputs; ``sft_on_dpo``: the reverse) are named in
:mod:`access.directions`; one recorder records one of them.

A driver whose forward does not run the Hugging Face blocks as modules (none of the three today,
but a wrapper might) leaves the pre-hooks silent; :meth:`LocalRecorder.record` then runs the
source itself up to the last needed block, which costs one more forward of the source.

Example:
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> from access.batches import position_ids_for
    >>> tiny = LlamaConfig(hidden_size=8, intermediate_size=16, num_attention_heads=2, num_hidden_layers=2)
    >>> torch.manual_seed(0); sft = LlamaForCausalLM(tiny); dpo = LlamaForCausalLM(tiny)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    >>> batch = TokenBatch(torch.tensor([[0, 5, 6], [4, 5, 6]]), mask, position_ids_for(mask))
    >>> local = LocalRecorder(sft, dpo, ["mlp_post"], [0, 1], "last")
    >>> local.record(batch, lambda: None)["mlp_post"].shape   # no driver forward ran: it runs SFT itself
    torch.Size([2, 2, 16])
    >>> same = LocalRecorder(sft, sft, ["mlp_out"], [1], "last").record(batch, lambda: None)["mlp_out"]
    >>> from access.drivers.torch_hooks import TorchBackend
    >>> torch.equal(same, TorchBackend(sft, ["mlp_out"], [1], "last").record(batch)["mlp_out"])
    True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from access.batches import TokenBatch
from access.directions import DIRECTIONS, directions_of
from access.drivers.base import Collector, HookFiringError
from access.hook_points import attach, blocks
from access.stack import run_block_alone
from core.models import input_embedding

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class _BlockDone(Exception):
    """Raised from the other block's last needed hook point: the rest of that block is not needed."""


class _SourceDone(Exception):
    """Raised after the last needed block when this recorder runs the source itself."""


class LocalRecorder:
    """Records ``other``'s blocks on ``source``'s block inputs (see the module doc); one instance per direction."""

    def __init__(
        self,
        source: PreTrainedModel,
        other: PreTrainedModel,
        hooks: Sequence[str],
        layers: Sequence[int],
        position: str,
    ) -> None:
        self.source, self.other = source, other
        self.hooks, self.layers = tuple(hooks), list(layers)
        self.collector = Collector(other, hooks, layers, position)
        self._source_blocks, self._other_blocks = blocks(source), blocks(other)
        self._fired: dict[int, int] = {}
        self._own_forward = self._inside = False
        self.last: Any = None

    def record(self, batch: TokenBatch, forward: Callable[[], Any]) -> dict[str, torch.Tensor]:
        """``{hook: [B, len(layers), width]}`` float32 on the CPU, while ``forward()`` runs the source on ``batch``.

        ``forward`` is the driver's own recording of the source (its result is returned through :attr:`last`);
        if it never ran the source's blocks, the source is run here up to the last needed block.
        """
        self.collector.reset(batch.reduce_mask)
        self._fired = dict.fromkeys(self.layers, 0)
        handles = [
            self._source_blocks[layer].register_forward_pre_hook(self._pre_hook(layer), with_kwargs=True)
            for layer in self.layers
        ]
        try:
            self.last = forward()
            if not any(self._fired.values()):
                self._run_source(batch)
        finally:
            for handle in handles:
                handle.remove()
        return self.collector.result()

    def _run_source(self, batch: TokenBatch) -> None:
        device = input_embedding(self.source).device
        self._own_forward = True
        try:
            with torch.inference_mode():
                self.source.base_model(
                    input_ids=batch.input_ids.to(device),
                    attention_mask=batch.attention_mask.to(device),
                    position_ids=batch.position_ids.to(device),
                    use_cache=False,
                )
        except _SourceDone:
            pass
        finally:
            self._own_forward = False

    def _pre_hook(self, layer: int) -> Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], None]:
        def run_other(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if self._inside:
                return  # the other model's own block, when both are one model (a check against itself)
            self._fired[layer] += 1
            if self._fired[layer] > 1:
                raise HookFiringError(
                    f"block {layer} ran {self._fired[layer]} times in one forward pass, expected once; the local "
                    "recording needs each block called once"
                )
            self._run_other(layer, args, kwargs)
            if self._own_forward and self.collector.complete:
                raise _SourceDone  # the blocks above are not needed

        return run_other

    def _run_other(self, layer: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        pending = set(self.hooks)

        def take(hook: str) -> Callable[[torch.Tensor], None]:
            def fn(x: torch.Tensor) -> None:
                self.collector.take(hook, layer, x)
                pending.discard(hook)
                if not pending:
                    raise _BlockDone

            return fn

        handles = [attach(self.other, hook, layer, take(hook)) for hook in self.hooks]
        self._inside = True
        try:
            with torch.inference_mode():
                run_block_alone(self._other_blocks[layer], args, kwargs)
        except _BlockDone:
            pass
        finally:
            self._inside = False
            for handle in handles:
                handle.remove()


def local_recorders(
    choice: str, models: dict[str, PreTrainedModel], hooks: Sequence[str], layers: Sequence[int], position: str
) -> dict[str, tuple[str, LocalRecorder]]:
    """``{source model: (direction, recorder)}`` for a ``--local`` choice (``models``: ``{"sft": ..., "dpo": ...}``).

    Each direction has its own source model, so a source carries at most one recorder.
    """
    return {
        DIRECTIONS[d][0]: (
            d,
            LocalRecorder(models[DIRECTIONS[d][0]], models[DIRECTIONS[d][1]], hooks, layers, position),
        )
        for d in directions_of(choice)
    }
