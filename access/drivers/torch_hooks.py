"""The default driver: plain PyTorch hooks on the Hugging Face modules, to capture and to edit.

Hooks come from :func:`access.hook_points.attach` (the same table interventions use),
are registered for one forward and removed in ``finally``. The forward runs the base
model (``model.base_model``), skipping the LM head, and stops as soon as the last
requested hook point has fired, so recording layers 0-11 of a 32-layer model costs
twelve blocks, not thirty-two. That is why recording is *faster* than a plain forward.

Editing (:func:`generate`) attaches each site function with the same
:func:`access.hook_points.attach` for the whole of ``model.generate``, so it applies at the
prompt forward and at every decoding step, and removes the hooks in ``finally``.

Example:
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> from access.batches import TokenBatch, position_ids_for
    >>> tiny = LlamaConfig(hidden_size=8, intermediate_size=16, num_attention_heads=2, num_hidden_layers=2)
    >>> mask = torch.tensor([[0, 1, 1], [1, 1, 1]])   # row 0 is left-padded
    >>> batch = TokenBatch(torch.tensor([[0, 5, 6], [4, 5, 6]]), mask, position_ids_for(mask))
    >>> TorchBackend(LlamaForCausalLM(tiny), ["mlp_post"], [0, 1], "last").record(batch)["mlp_post"].shape
    torch.Size([2, 2, 16])
    >>> TorchBackend(model, ["mlp_out"], [0, 1], "last").record(batch)["mlp_out"].shape   # doctest: +SKIP
    torch.Size([8, 2, 4096])
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

import torch

from access.batches import TokenBatch
from access.drivers.base import Collector, SiteEdits, check_distinct_modules
from access.hook_points import attach
from core.models import input_embedding

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from access.generation import Generations, Generator


class _StopForward(Exception):
    """Raised from the last hook to end the forward pass early."""


class TorchBackend:
    name: str

    def __init__(
        self,
        model: PreTrainedModel,
        hooks: Sequence[str],
        layers: Sequence[int],
        position: str,
        *,
        tokenizer: PreTrainedTokenizerBase | None = None,  # noqa: ARG002 - the driver constructor's keyword, passed to every driver
        model_dir: Any = None,  # noqa: ARG002 - the driver constructor's keyword, passed to every driver
        stop_early: bool = True,
    ) -> None:
        self.model, self.hooks, self.layers, self.position = model, tuple(hooks), list(layers), position
        self.stop_early = stop_early
        check_distinct_modules(model, hooks, layers)
        self.collector = Collector(model, hooks, layers, position)

    def _hook(self, hook: str, layer: int) -> Any:
        def fn(x: torch.Tensor) -> None:
            self.collector.take(hook, layer, x)
            if self.stop_early and self.collector.complete:
                raise _StopForward

        return fn

    @torch.inference_mode()
    def record(self, batch: TokenBatch) -> dict[str, torch.Tensor]:
        device = input_embedding(self.model).device
        self.collector.reset(batch.reduce_mask)
        handles = [
            attach(self.model, hook, layer, self._hook(hook, layer)) for hook in self.hooks for layer in self.layers
        ]
        try:
            self.model.base_model(
                input_ids=batch.input_ids.to(device),
                attention_mask=batch.attention_mask.to(device),
                position_ids=batch.position_ids.to(device),
                use_cache=False,
            )
        except _StopForward:
            pass
        finally:
            for handle in handles:
                handle.remove()
        return self.collector.result()


@contextmanager
def applied(model: PreTrainedModel, edits: SiteEdits) -> Iterator[Any]:
    """Within the block, every forward of ``model`` has ``edits`` applied; yields ``edits.stats``."""
    with ExitStack() as stack:
        if edits.around is not None:
            stack.enter_context(edits.around)
        for hook, layer, fn in edits.sites:
            stack.callback(attach(model, hook, layer, fn).remove)
        yield edits.stats


def generate(generator: Generator, edits: SiteEdits | None) -> Generations:
    """The generator's rows, generated once with ``edits`` hooked in (``None``: plain generation)."""
    return generator.run(None if edits is None else applied(generator.model, edits))
