"""Where each named hook point lives in a Hugging Face model, and how to attach to it.

Hook points use TransformerLens's vocabulary so that results read the same whichever
backend recorded them:

==============  ======================================================  ==================
name            tensor                                                  width
==============  ======================================================  ==================
``mlp_out``     output of block *i*'s MLP (TL ``blocks.{i}.hook_mlp_out``)  d_model
``attn_out``    output of block *i*'s attention (``hook_attn_out``)        d_model
``resid_post``  output of block *i* (``hook_resid_post``)                d_model
``mlp_post``    input of the MLP down-projection: the true MLP neurons    intermediate_size
==============  ======================================================  ==================

An :class:`Architecture` row says where the blocks and their parts are for one model
family; :func:`attach` registers a plain PyTorch hook that hands the hook point's
tensor ``[batch, pos, width]`` to a callback, which may return a replacement. This is
the cheapest possible instrumentation (no graph rewriting, no proxy objects), which is
why it is the default backend and what interventions use.

Example:
    >>> handle = attach(model, "mlp_out", 3, lambda x: x * 0.5)   # doctest: +SKIP
    >>> handle.remove()                                           # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from core.errors import ProbeError

HOOK_POINTS: tuple[str, ...] = ("mlp_out", "attn_out", "resid_post", "mlp_post")
TL_NAMES: dict[str, str] = {
    "mlp_out": "blocks.{i}.hook_mlp_out",
    "attn_out": "blocks.{i}.hook_attn_out",
    "resid_post": "blocks.{i}.hook_resid_post",
    "mlp_post": "blocks.{i}.mlp.hook_post",
}

HookFn = Callable[[torch.Tensor], torch.Tensor | None]


@dataclass(frozen=True)
class Architecture:
    """Module paths for one model family, relative to the ``*ForCausalLM`` object."""

    family: str
    layers: str  # dotted path to the ModuleList of blocks
    attention: str  # attribute of a block
    mlp: str  # attribute of a block
    down_proj: str  # attribute of the MLP whose *input* is the neuron vector
    intermediate_size_attr: str = "intermediate_size"


_LLAMA_LIKE = dict(layers="model.layers", attention="self_attn", mlp="mlp", down_proj="down_proj")
ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture("llama", **_LLAMA_LIKE),
    "mistral": Architecture("mistral", **_LLAMA_LIKE),
    "qwen2": Architecture("qwen2", **_LLAMA_LIKE),
    "qwen3": Architecture("qwen3", **_LLAMA_LIKE),
    "gemma": Architecture("gemma", **_LLAMA_LIKE),
    "gemma2": Architecture("gemma2", **_LLAMA_LIKE),
    "gpt2": Architecture("gpt2", layers="transformer.h", attention="attn", mlp="mlp", down_proj="c_proj", intermediate_size_attr="n_inner"),
}


def validate_hook(hook: str) -> str:
    if hook not in HOOK_POINTS:
        raise ProbeError(f"unknown hook point {hook!r}; expected one of {', '.join(HOOK_POINTS)}")
    return hook


def architecture_of(model: nn.Module) -> Architecture:
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in ARCHITECTURES:
        raise ProbeError(f"unsupported architecture {model_type!r}; supported: {', '.join(sorted(ARCHITECTURES))}")
    return ARCHITECTURES[model_type]


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def blocks(model: nn.Module) -> nn.ModuleList:
    return _get(model, architecture_of(model).layers)


def n_layers(model: nn.Module) -> int:
    return len(blocks(model))


def width(model: nn.Module, hook: str) -> int:
    """The expected width of a hook point (d_model, or intermediate_size for ``mlp_post``)."""
    config = model.config
    validate_hook(hook)
    if hook != "mlp_post":
        return int(getattr(config, "hidden_size", None) or config.n_embd)
    arch = architecture_of(model)
    size = getattr(config, arch.intermediate_size_attr, None)
    return int(size) if size else 4 * int(config.n_embd)


def module_for(model: nn.Module, hook: str, layer: int) -> tuple[nn.Module, bool]:
    """The module to hook and whether the tensor is its *input* (pre-hook) rather than its output."""
    validate_hook(hook)
    arch = architecture_of(model)
    layer_list = blocks(model)
    if not 0 <= layer < len(layer_list):
        raise ProbeError(f"layer {layer} is outside the model, which has layers 0-{len(layer_list) - 1}")
    block = layer_list[layer]
    if hook == "mlp_out":
        return getattr(block, arch.mlp), False
    if hook == "attn_out":
        return getattr(block, arch.attention), False
    if hook == "resid_post":
        return block, False
    return getattr(getattr(block, arch.mlp), arch.down_proj), True


def attach(model: nn.Module, hook: str, layer: int, fn: HookFn) -> RemovableHandle:
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

    >>> parse_layers("1-3,7", 8)
    [1, 2, 3, 7]
    """
    if spec is None or spec.strip().lower() in ("", "all"):
        return list(range(total))
    layers: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo_s, hi_s = part.split("-", 1)
                lo, hi = int(lo_s), (int(hi_s) if hi_s else total - 1)
                if lo > hi:
                    raise ValueError
                layers.update(range(lo, hi + 1))
            else:
                layers.add(int(part))
        except ValueError:
            raise ProbeError(f"--layers {spec!r}: expected a range like 12-31 or a list like 3,5,7") from None
    outside = sorted(i for i in layers if not 0 <= i < total)
    if outside:
        raise ProbeError(f"--layers {spec!r}: layer {outside[0]} is outside the model, which has layers 0-{total - 1}")
    return sorted(layers)
