"""The model-access layer: one row per hook point, one path resolver, and how to attach.

Hook points use TransformerLens's vocabulary so that results read the same whichever
driver recorded them. Everything the toolkit knows about a hook point is its row in
:data:`HOOK_TABLE`; recording (:mod:`access.drivers`) and editing
(:mod:`access.edits`) both read it, and nothing else restates it:

==============  ===========================  ======  ==========  ====================================
name            module (of block *i*)        tensor  width       TransformerLens name
==============  ===========================  ======  ==========  ====================================
``mlp_out``     the MLP                      output  d_model     ``blocks.{i}.hook_mlp_out``
``attn_out``    the attention                output  d_model     ``blocks.{i}.hook_attn_out``
``resid_post``  the block                    output  d_model     ``blocks.{i}.hook_resid_post``
``mlp_post``    the MLP's down-projection    input   d_mlp       ``blocks.{i}.mlp.hook_post``
``attn_z``      the attention's output       input   d_attn      ``blocks.{i}.attn.hook_z``
                projection
==============  ===========================  ======  ==========  ====================================

``mlp_post`` is the true MLP neuron vector (width ``intermediate_size``); ``attn_z`` is every head's output
before the output projection, head after head (width ``num_attention_heads x head_dim``: head *h* is units
``h*head_dim`` to ``(h+1)*head_dim - 1``). An
:class:`Architecture` row says where the blocks and their parts are for one model family;
:func:`module_path` joins the two into a dotted path from the ``*ForCausalLM`` object (also
the nnsight envoy path), and :func:`resolve` follows such a path on a module or an envoy.
:func:`attach` registers a plain PyTorch hook that hands the hook point's tensor
``[batch, pos, width]`` to a callback, which may return a replacement: the cheapest
possible instrumentation (no graph rewriting, no proxy objects).

Example:
    >>> HOOK_TABLE["mlp_post"].tl_name.format(i=3), HOOK_TABLE["mlp_post"].is_input
    ('blocks.3.mlp.hook_post', True)
    >>> handle = attach(model, "mlp_out", 3, lambda x: x * 0.5)   # doctest: +SKIP
    >>> handle.remove()                                           # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from access.hook_table import HOOK_POINTS, HOOK_TABLE, Part
from core.errors import ProbeError

if TYPE_CHECKING:
    from transformers import PreTrainedModel


HookFn = Callable[[torch.Tensor], torch.Tensor | None]


@dataclass(frozen=True)
class Architecture:
    """One model family: its module paths, relative to the ``*ForCausalLM`` object, and what the toolkit does with it.

    Every family records, attaches hooks and edits. ``shared_decoding``: :mod:`access.shared_generation` reproduces
    its forward (embed, rotary, blocks, norm), so many arms decode in shared batches; without it, arm by arm.
    ``checkpoint_readout``: :mod:`analysis.checkpoint` reads its weights by name (attention and a gated MLP adding to
    the residual stream, RMSNorm), so ``probe explain`` can read what units write; without it, explain refuses it.
    """

    family: str
    layers: str  # dotted path to the ModuleList of blocks
    attention: str  # attribute of a block
    mlp: str  # attribute of a block
    down_proj: str  # attribute of the MLP whose *input* is the neuron vector
    o_proj: str = "o_proj"  # attribute of the attention whose *input* is every head's output
    intermediate_size_attr: str = "intermediate_size"
    shared_decoding: bool = False
    checkpoint_readout: bool = False

    def part_path(self, part: Part) -> str:
        """The dotted path of ``part`` inside one block ("" for the block itself)."""
        return {
            "attention": self.attention,
            "o_proj": f"{self.attention}.{self.o_proj}",
            "mlp": self.mlp,
            "down_proj": f"{self.mlp}.{self.down_proj}",
            "block": "",
        }[part]


_LLAMA_LIKE: dict[str, Any] = {
    "layers": "model.layers",
    "attention": "self_attn",
    "mlp": "mlp",
    "down_proj": "down_proj",
}
_FULL: dict[str, Any] = dict(_LLAMA_LIKE, shared_decoding=True, checkpoint_readout=True)
ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture("llama", **_FULL),
    "mistral": Architecture("mistral", **_FULL),
    "qwen2": Architecture("qwen2", **_FULL),
    "qwen3": Architecture("qwen3", **_FULL),
    "gemma": Architecture("gemma", **_LLAMA_LIKE),  # scaled embeddings, (1 + w) norms: neither engine has them
    "gemma2": Architecture("gemma2", **_LLAMA_LIKE),
    "gpt2": Architecture(
        "gpt2",
        layers="transformer.h",
        attention="attn",
        mlp="mlp",
        down_proj="c_proj",
        o_proj="c_proj",
        intermediate_size_attr="n_inner",
    ),
}


def families(capability: str) -> tuple[str, ...]:
    """The families with ``capability`` (``"shared_decoding"`` or ``"checkpoint_readout"``), in table order."""
    return tuple(name for name, arch in ARCHITECTURES.items() if getattr(arch, capability))


def validate_hook(hook: str) -> str:
    if hook not in HOOK_TABLE:
        raise ProbeError(f"unknown hook point {hook!r}; expected one of {', '.join(HOOK_POINTS)}")
    return hook


def architecture_of(model: PreTrainedModel) -> Architecture:
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in ARCHITECTURES:
        raise ProbeError(f"unsupported architecture {model_type!r}; supported: {', '.join(sorted(ARCHITECTURES))}")
    return ARCHITECTURES[model_type]


def resolve(root: Any, dotted: str) -> Any:
    """Follow a dotted path (``model.layers.3.mlp``) on a module or an nnsight envoy; digits index a list."""
    for part in filter(None, dotted.split(".")):
        root = root[int(part)] if part.isdigit() else getattr(root, part)
    return root


def blocks(model: PreTrainedModel) -> nn.ModuleList:
    layers: nn.ModuleList = resolve(model, architecture_of(model).layers)
    return layers


def n_layers(model: PreTrainedModel) -> int:
    return len(blocks(model))


def width(model: PreTrainedModel, hook: str) -> int:
    """The expected width of a hook point: d_model, intermediate_size (d_mlp), or heads x head_dim (d_attn)."""
    config = model.config
    kind = HOOK_TABLE[validate_hook(hook)].width
    d_model = int(getattr(config, "hidden_size", None) or config.n_embd)
    if kind == "d_model":
        return d_model
    if kind == "d_attn":
        heads, head_dim = head_shape(model)
        return heads * head_dim
    size = getattr(config, architecture_of(model).intermediate_size_attr, None)
    return int(size) if size else 4 * d_model


def head_shape(model: PreTrainedModel) -> tuple[int, int]:
    """(attention heads, head_dim) of ``model``: the ``attn_z`` hook point is ``heads`` blocks of ``head_dim`` units."""
    config = model.config
    heads = int(getattr(config, "num_attention_heads", None) or config.n_head)
    d_model = int(getattr(config, "hidden_size", None) or config.n_embd)
    return heads, int(getattr(config, "head_dim", None) or d_model // heads)


def module_path(model: PreTrainedModel, hook: str, layer: int) -> str:
    """The dotted path from the model to the module carrying ``hook`` at ``layer`` (also its nnsight envoy path)."""
    arch = architecture_of(model)
    total = n_layers(model)
    if not 0 <= layer < total:
        raise ProbeError(f"layer {layer} is outside the model, which has layers 0-{total - 1}")
    inner = arch.part_path(HOOK_TABLE[validate_hook(hook)].part)
    return f"{arch.layers}.{layer}" + (f".{inner}" if inner else "")


def module_for(model: PreTrainedModel, hook: str, layer: int) -> tuple[nn.Module, bool]:
    """The module to hook and whether the tensor is its *input* (pre-hook) rather than its output."""
    return resolve(model, module_path(model, hook, layer)), HOOK_TABLE[hook].is_input


def attach(model: PreTrainedModel, hook: str, layer: int, fn: HookFn) -> RemovableHandle:
    """Call ``fn`` on the hook point's tensor ``[batch, pos, width]`` at every forward.

    If ``fn`` returns a tensor, it replaces the hook point's value downstream.
    """
    module, is_input = module_for(model, hook, layer)
    if is_input:

        def pre_hook(_module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
            new = fn(args[0])
            return None if new is None else (new, *args[1:])

        return module.register_forward_pre_hook(pre_hook)

    def forward_hook(_module: nn.Module, _args: tuple[Any, ...], output: Any) -> Any:
        tensor = output[0] if isinstance(output, tuple) else output
        new = fn(tensor)
        if new is None:
            return None
        return (new, *output[1:]) if isinstance(output, tuple) else new

    return module.register_forward_hook(forward_hook)


def parse_layers(spec: str | None, total: int) -> list[int]:
    """Parse '12-31', '3,5,7', '12-' or None (all) into sorted layer indices, checked against ``total``.

    Ranges are checked before they are expanded, so a typo such as ``0-70000000`` costs nothing.

    >>> parse_layers("1-3,7", 8)
    [1, 2, 3, 7]
    """
    if spec is None or spec.strip().lower() in ("", "all"):
        return list(range(total))
    layers: set[int] = set()
    for lo, hi in layer_ranges(spec, total):
        if lo < 0 or hi >= total:
            raise ProbeError(
                f"--layers {spec!r}: layer {lo if lo < 0 else max(lo, total)} is outside the model, "
                f"which has layers 0-{total - 1}"
            )
        layers.update(range(lo, hi + 1))
    return sorted(layers)


def layer_ranges(spec: str, total: int) -> list[tuple[int, int]]:
    """The inclusive ranges of a layer spec, unexpanded and unchecked against the model ('12-' ends at
    ``total - 1``)."""
    if spec.strip().lower() in ("", "all"):
        return [(0, total - 1)]
    ranges = []
    for part in (p.strip() for p in spec.split(",")):
        try:
            if "-" in part[1:]:
                lo_s, hi_s = part.split("-", 1)
                lo = int(lo_s)
                hi = int(hi_s) if hi_s else max(lo, total - 1)
            else:
                lo = hi = int(part)
            if not 0 <= lo <= hi:
                raise ValueError
        except ValueError:
            raise ProbeError(f"--layers {spec!r}: expected a range like 12-31 or a list like 3,5,7") from None
        ranges.append((lo, hi))
    return ranges
