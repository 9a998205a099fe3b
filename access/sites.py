"""The site functions every edit kind is built from, and what they count.

A site function receives a hook point's tensor ``[batch, pos, width]`` at one forward and
returns the edited tensor (in place where that is exact and safe). The torch and nnsight
drivers call the very same functions, so both compute the same edit. Arithmetic is done in
float32 and cast back to the activation's dtype, so a factor or a vector is never rounded to
a 16-bit dtype first; untouched units stay bit-identical.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from access.drivers.base import SiteFn


@dataclass
class EditStats:
    """What the site functions saw, accumulated on the model's device without syncing per call.

    Values are compared on multi-token forwards (the prompt pass of each ``generate`` call),
    which is enough for the no-op guard and keeps the per-token cost at the edit itself.
    """

    calls: int = 0
    values_seen: torch.Tensor | int = 0
    values_changed: torch.Tensor | int = 0

    def count(self, before: torch.Tensor | None, after: torch.Tensor | None) -> None:
        self.calls += 1
        if before is not None and after is not None:
            self.values_seen = self.values_seen + before.numel()
            self.values_changed = self.values_changed + (before != after).sum()

    def as_dict(self) -> dict[str, int]:
        return {key: int(value) for key, value in self.raw().items()}

    def raw(self) -> dict[str, torch.Tensor | int]:
        """:meth:`as_dict` without reading the counts off the device (no sync)."""
        return {"calls": self.calls, "values_seen": self.values_seen, "values_changed": self.values_changed}


def tracked(x: torch.Tensor) -> bool:
    """Whether this forward's changes are counted: a multi-token forward (a prompt pass)."""
    return x.dim() >= 2 and x.shape[-2] > 1


def scale_fn(index: torch.Tensor, factor: float, stats: EditStats) -> SiteFn:
    """Multiply the units ``index`` by ``factor`` through a per-unit scale vector (1 elsewhere): one kernel,
    in place for float32 activations without autograd, ``(x.float() * scale).to(dtype)`` otherwise.
    Multiplying by exactly 1.0 is exact, so untouched units stay bit-identical."""
    cache: dict[tuple[torch.device, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def fn(x: torch.Tensor) -> torch.Tensor:
        key = (x.device, x.shape[-1])
        if key not in cache:
            scale = torch.ones(x.shape[-1], dtype=torch.float32, device=x.device)
            scale[index.to(x.device)] = factor
            cache[key] = (index.to(x.device), scale)
        idx, scale = cache[key]
        old = x.index_select(-1, idx) if tracked(x) else None
        if x.dtype == torch.float32 and not (torch.is_grad_enabled() and x.requires_grad):
            out = x.mul_(scale)
        else:
            out = (x.to(torch.float32) * scale).to(x.dtype)
        stats.count(old, out.index_select(-1, idx) if old is not None else None)
        return out

    return fn


def write_fn(index: torch.Tensor, values: Callable[[], torch.Tensor], stats: EditStats) -> SiteFn:
    """Write ``values()`` (``[k]``, or ``[batch, pos, k]`` matching this forward) into the units ``index``."""
    cache: dict[torch.device, torch.Tensor] = {}

    def fn(x: torch.Tensor) -> torch.Tensor:
        idx = cache.setdefault(x.device, index.to(x.device))
        old = x.index_select(-1, idx) if tracked(x) else None
        out = x if not (torch.is_grad_enabled() and x.requires_grad) else x.clone()
        out[..., idx] = values().to(device=x.device, dtype=torch.float32).to(x.dtype)
        stats.count(old, out.index_select(-1, idx) if old is not None else None)
        return out

    return fn


def add_fn(delta: torch.Tensor, stats: EditStats) -> SiteFn:
    """Add ``delta`` (``[width]``, float32) at every position."""
    cache: dict[torch.device, torch.Tensor] = {}

    def fn(x: torch.Tensor) -> torch.Tensor:
        shift = cache.setdefault(x.device, delta.to(x.device))
        out = (x.to(torch.float32) + shift).to(x.dtype)
        stats.count(x if tracked(x) else None, out if tracked(x) else None)
        return out

    return fn
