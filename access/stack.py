"""One stack under every engine: a model's decoder walked block by block, prompt batching, and what it can run.

A forward can run two ways (:data:`ENGINES`). ``per-arm`` hands each arm's whole sequence to ``transformers`` (a
``generate`` or a forward per arm); ``shared`` walks the decoder here, block by block, so that the engines built on
it compute once what their arms share:

* :mod:`access.shared_generation` decodes many greedy arms in shared batches (the blocks below the edits once per
  group of rows, a stem of prompts once per batch);
* :mod:`access.forced_shared` teacher-forces fixed responses for :class:`access.outcomes.Outcomes` (each prompt once
  for all its responses, each arm from its fork layer);
* :mod:`access.local_blocks` runs one model's block on another's input (:func:`run_block_alone`);
* :class:`access.amplify.WeightBlend` arms start at the lowest block holding a parameter they blend
  (:meth:`Stack.lowest_block`).

The walk (:class:`Stack`, :func:`run_blocks`) is the one of the families :func:`access.hook_points.families` marks
``shared_decoding``: embed, one rotary embedding and one causal mask (the model's own ``create_causal_mask``) for a
range of blocks, each decoder layer with a key/value cache, the final norm, the LM head. :func:`unsupported` is the
one place that says whether a model's decoder is such a walk. :func:`packed` cuts items into batches under a row and
padded-token budget, and :func:`rows_within` the rows of one forward under it. Importing this module loads no torch
(the CLI reads :data:`ENGINES` from it).

Example:
    >>> ENGINES
    ('shared', 'per-arm')
    >>> lengths = [3, 5, 8, 8]   # items in order; a batch pads each row to its longest
    >>> packed(range(4), lambda b: (len(b), len(b) * max(lengths[i] for i in b)), max_batch_tokens=16, batch_size=3)
    [[0, 1], [2, 3]]
    >>> rows_within(16, length=5)
    3
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> import torch
    >>> config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
    ...                      num_attention_heads=2, num_key_value_heads=1)
    >>> _ = torch.manual_seed(0); model = LlamaForCausalLM(config).eval()
    >>> unsupported(model) is None
    True
    >>> stack, ids, mask = Stack(model), torch.tensor([[5, 6, 7]]), torch.ones(1, 3, dtype=torch.long)
    >>> hidden, _ = stack.blocks(stack.embed(ids), range(2), mask, torch.arange(3)[None], stack.new_cache(),
    ...                          allow_skip=True)
    >>> torch.allclose(stack.logits(hidden), model(input_ids=ids).logits, atol=1e-6)
    True
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from core.errors import ProbeError

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PreTrainedModel

SHARED, PER_ARM = "shared", "per-arm"
# the one choice of engine: the stack's shared passes, or one whole transformers forward (or generate) per arm
ENGINES: tuple[str, ...] = (SHARED, PER_ARM)
_CACHE_KWARGS = ("past_key_values", "past_key_value", "layer_past")  # what a block is handed of its forward's cache

Item = TypeVar("Item")


def unsupported(model: PreTrainedModel) -> str | None:
    """Why the stack cannot run ``model``'s decoder (``None``: it can): a family whose forward it reproduces, with
    full attention in every layer."""
    from access.hook_points import families

    model_type = getattr(model.config, "model_type", "")
    if model_type not in families("shared_decoding"):
        return f"model type {model_type!r} is not one the stack reproduces ({', '.join(families('shared_decoding'))})"
    if set(getattr(model.config, "layer_types", None) or ["full_attention"]) != {"full_attention"}:
        return "the stack does not run sliding-window attention layers"
    return None


def supports(model: PreTrainedModel) -> bool:
    """Whether the stack runs ``model``'s decoder (:func:`unsupported` says why not)."""
    return unsupported(model) is None


class Decoder(Protocol):
    """What the stack runs of ``model.get_decoder()``."""

    @property
    def embed_tokens(self) -> nn.Module: ...

    @property
    def layers(self) -> nn.ModuleList: ...

    @property
    def norm(self) -> nn.Module: ...

    @property
    def rotary_emb(self) -> nn.Module: ...


class Stack:
    """One model's decoder (a family :func:`supports` accepts), walked block by block."""

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.decoder: Decoder = model.get_decoder()
        self.head: Any = model.get_output_embeddings()
        self.total = len(self.decoder.layers)
        self.device = self.head.weight.device

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.decoder.embed_tokens(ids)  # type: ignore[no-any-return]

    def blocks(
        self,
        hidden: torch.Tensor,
        layers: range,
        mask_2d: torch.Tensor,
        positions: torch.Tensor,
        cache: Any,
        *,
        allow_skip: bool,
        keep: Collection[int] = (),
        packed: bool = False,
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """:func:`run_blocks` on this model."""
        return run_blocks(
            self.model,
            self.decoder,
            hidden,
            layers,
            mask_2d,
            positions,
            cache,
            allow_skip=allow_skip,
            keep=keep,
            packed=packed,
        )

    def norm(self, hidden: torch.Tensor) -> torch.Tensor:
        """The final norm (the LM head's input)."""
        return self.decoder.norm(hidden)  # type: ignore[no-any-return]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head on the normed output of the top block."""
        return self.head(self.norm(hidden))  # type: ignore[no-any-return]

    def new_cache(self, reserve: int = 0) -> Any:
        """An empty key/value cache (:func:`access.kv_cache.new_cache`)."""
        from access.kv_cache import new_cache

        return new_cache(self.model.config, reserve)

    def lowest_block(self, parameters: Iterable[str]) -> int:
        """The lowest block holding one of the named parameters: 0 for one outside the blocks (the embeddings, the
        final norm, the head), :attr:`total` for none."""
        block = {id(p): i for i, layer in enumerate(self.decoder.layers) for p in layer.parameters()}
        names = dict(self.model.named_parameters())
        return min((block.get(id(names[name]), 0) for name in parameters), default=self.total)


def run_blocks(
    model: PreTrainedModel,
    decoder: Any,
    hidden: torch.Tensor,
    layers: range,
    mask_2d: torch.Tensor,
    positions: torch.Tensor,
    cache: Any,
    *,
    allow_skip: bool,
    keep: Collection[int] = (),
    packed: bool = False,
) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """The decoder's blocks ``layers`` on ``hidden`` with one causal mask and one rotary embedding for them all;
    ``keep``: the block indices (and ``layers.stop``) whose *input* hidden states to return as well; ``packed``: over
    the real tokens only where :func:`access.packed_rows.packs` says so (no block's input is kept then)."""
    from transformers.masking_utils import create_causal_mask

    from access.packed_rows import PACKED_ROWS, PackedCache, PackedRows, packs

    kept: dict[int, torch.Tensor] = {}
    if layers:
        mask = create_causal_mask(
            config=model.config,
            inputs_embeds=hidden,
            attention_mask=mask_2d,
            past_key_values=cache,
            position_ids=positions,
            layer_idx=layers.start,
            allow_is_causal_skip=allow_skip,
        )
        own = mask_2d[:, mask_2d.shape[1] - hidden.shape[1] :]
        if packed and not keep and packs(model, own):
            rows = PackedRows.of(own)
            extra = {PACKED_ROWS: rows}
            out = walk(
                decoder, rows.pack(hidden), layers, mask, rows.pack(positions), PackedCache(cache, rows), extra=extra
            )
            return rows.unpack(out), kept
        hidden = walk(decoder, hidden, layers, mask, positions, cache, kept=kept, keep=keep)
    if layers.stop in keep:
        kept[layers.stop] = hidden
    return hidden, kept


def walk(
    decoder: Any,
    hidden: torch.Tensor,
    layers: range,
    mask: Any,
    positions: torch.Tensor,
    cache: Any,
    *,
    kept: dict[int, torch.Tensor] | None = None,
    keep: Collection[int] = (),
    extra: Mapping[str, Any] | None = None,
) -> torch.Tensor:
    """The decoder layers ``layers`` on ``hidden``, one rotary embedding and the built ``mask`` for them all, each with
    ``cache``, under :func:`access.attention.walk_attention`; the input of each block of ``keep`` goes into ``kept``;
    ``extra``: keywords every layer passes on to its attention function."""
    from access.attention import walk_attention

    rotary = decoder.rotary_emb(hidden, position_ids=positions)
    with walk_attention(decoder.config):
        for index in layers:
            if kept is not None and index in keep:
                kept[index] = hidden
            hidden = decoder.layers[index](
                hidden,
                attention_mask=mask,
                position_embeddings=rotary,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                **(extra or {}),
            )
    return hidden


def run_block_alone(block: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """One decoder block on the inputs another forward handed its own block (masks, rotary embeddings, positions),
    without that forward's key/value cache, which is not this block's."""
    clean = {k: (None if k in _CACHE_KWARGS else v) for k, v in kwargs.items()}
    if "use_cache" in clean:
        clean["use_cache"] = False
    return block(*args, **clean)


def packed(
    order: Iterable[Item],
    size: Callable[[list[Item]], tuple[int, int]],
    max_batch_tokens: int,
    batch_size: int,
) -> list[list[Item]]:
    """``order`` cut, in order, into batches whose ``size`` (rows, padded tokens) stays within ``batch_size`` rows
    and ``max_batch_tokens`` tokens; an item over the budget on its own gets a batch of its own."""
    if max_batch_tokens < 1 or batch_size < 1:
        raise ProbeError(f"outcomes: batch limits must be positive, got {max_batch_tokens} tokens, {batch_size} rows")
    batches: list[list[Item]] = []
    for item in order:
        if batches:
            rows, tokens = size([*batches[-1], item])
            if rows <= batch_size and tokens <= max_batch_tokens:
                batches[-1].append(item)
                continue
        batches.append([item])
    return batches


def rows_within(max_batch_tokens: int, length: int) -> int:
    """How many rows of ``length`` tokens one forward takes under ``max_batch_tokens`` (at least one)."""
    return max(1, max_batch_tokens // max(1, length))
