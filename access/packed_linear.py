"""Greedy decoding's matrix products on weights packed once for oneDNN (a CPU model in float32).

A decode step multiplies a few dozen rows by every weight matrix. torch's float32 product on a CPU (MKL's ``sgemm``)
packs the weight again at every call: on one SmolLM2-135M block's shapes it sustains 64, 93, 121 and 140 GFLOP/s on 8,
16, 32 and 64 rows against 196 on 1,024 (2-core AMD EPYC Zen 4, 2026-11-30). oneDNN's product over a weight packed
once (``torch.ops.mkldnn._linear_pointwise``) runs at 124, 153, 175 and 197 on those rows. :func:`prepacked` runs every
float32 ``nn.Linear`` of CPU models through it for the duration of a block, and puts torch's own forward back after.
Shared decoding (:mod:`access.shared_generation`) and the per-arm engine (:mod:`access.edited_generation`, torch's
hooks) both decode on it, with their patch and amplification sources, so a baseline and its arms run the same products.

Its sums are not MKL's bit for bit (up to 1.8e-4 apart on random inputs whose outputs are about 40), so a greedy
token can differ where two logits nearly tie. On the default pair's 162 held-out rows, every one of SFT's and DPO's
responses was the same, and SFT's evaluation took 78.4 s instead of 92.7 (docs/report.md). A weight changed in place
(an amplification's blend) is packed again at its next call; a forward that builds an autograd graph keeps torch's
product; a model whose float32 products pass :data:`PACKED_BYTES` keeps them too (the packed copy doubles them).

Example:
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    >>> with torch.no_grad(), prepacked(model):
    ...     out = model(torch.ones(2, 4))
    >>> out.shape, "forward" in vars(model[0])   # torch's own forward is back
    (torch.Size([2, 3]), False)
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional

PACKED_BYTES = 2 * 2**30  # the packed copies one model may add: a laptop keeps room for everything else
_PACKED = "_probe_packed"  # a linear's packed weight, with the weight's storage and version it was packed from


def packable(model: nn.Module) -> bool:
    """Whether :func:`prepacked` packs ``model``: on a CPU, in float32, its products within :data:`PACKED_BYTES`,
    with oneDNN in this build of torch."""
    linears = _linears(model)
    weights = [linear.weight for linear in linears]
    return (
        bool(weights)
        and all(w.device.type == "cpu" and w.dtype == torch.float32 for w in weights)
        and sum(w.numel() * w.element_size() for w in weights) <= PACKED_BYTES
        and torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    )


@contextmanager
def prepacked(*models: nn.Module) -> Iterator[None]:
    """Inside, every ``nn.Linear`` of each :func:`packable` model multiplies by its packed weight (module doc)."""
    linears = [linear for model in models if packable(model) for linear in _linears(model)]
    linears = [linear for linear in linears if "forward" not in vars(linear)]  # nested: the outer one restores
    for linear in linears:
        linear.forward = types.MethodType(_packed_forward, linear)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for linear in linears:
            vars(linear).pop("forward", None)
            vars(linear).pop(_PACKED, None)


def _linears(model: nn.Module) -> list[nn.Linear]:
    return [module for module in model.modules() if isinstance(module, nn.Linear)]


def _packed_forward(self: nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    if torch.is_grad_enabled() and (hidden.requires_grad or self.weight.requires_grad):
        return functional.linear(hidden, self.weight, self.bias)
    key = (self.weight.data_ptr(), self.weight._version)
    packed = vars(self).get(_PACKED)
    if packed is None or packed[0] != key:
        packed = (key, torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), None))
        vars(self)[_PACKED] = packed
    rows = hidden.reshape(-1, hidden.shape[-1])
    out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(rows, packed[1], self.bias, "none", [], "")
    return out.reshape(*hidden.shape[:-1], out.shape[-1])
