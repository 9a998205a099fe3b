"""Scale chosen units of a hook point at every forward pass (torch backend).

One plain PyTorch hook per layer (via :func:`probes.hook_points.attach`) multiplies the
selected units by ``factor``. The product is computed in float32 and cast back to the
model's dtype, so ``factor`` is never rounded to the model dtype first; what *can*
still round away is the result, and :func:`dtype_noop_fraction` says exactly how often.

Why this is consistent with the KV cache: ``generate`` runs the prompt forward once and
then one forward per new token. The hook fires at each of them, on every position that
forward computes. Keys and values cached at layer *l* are computed from the residual
stream that already contains the intervened outputs of layers < *l* (and of *l* itself
for resid/MLP hooks feeding layer *l+1*), so the cached generation equals a full
recomputation of the intervened model over the whole sequence (tested with
``use_cache=False``).

Hooks are removed in ``finally``: an exception inside the block (or in generation)
leaves the model exactly as it was.

Example:
    >>> with scaled_units(model, neurons, factor=0.0) as stats:       # doctest: +SKIP
    ...     out = model.generate(**batch)
    >>> int(stats.values_changed)                                   # doctest: +SKIP
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from analysis.neuron_sets import NeuronSet
from core.errors import ProbeError
from interventions.selection import check_against_model
from probes.hook_points import attach

PAPER_FACTOR: float = 1.0 - 1e-6


def validate_factor(factor: float, name: str = "--factor") -> float:
    """A finite real number; anything else is a user mistake."""
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(float(factor)):
        raise ProbeError(f"{name} must be a finite number (0 ablates, 1 is no change), got {factor!r}")
    return float(factor)


def parse_factors(spec: str, name: str = "--dose") -> list[float]:
    """Parse ``"0,0.5,0.999999"`` into floats, with a clear error for anything else."""
    values: list[float] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        try:
            values.append(validate_factor(float(part), name))
        except ValueError:
            raise ProbeError(f"{name} {spec!r}: {part!r} is not a number; expected a comma-separated list like 0,0.5,0.999999") from None
    if not values:
        raise ProbeError(f"{name} {spec!r}: expected at least one factor")
    return values


@dataclass
class ScaleStats:
    """What the hooks saw, accumulated on the model's device without syncing per call."""

    calls: int = 0
    values_seen: torch.Tensor | int = 0
    values_changed: torch.Tensor | int = 0

    def as_dict(self) -> dict[str, int]:
        return {"calls": self.calls, "values_seen": int(self.values_seen), "values_changed": int(self.values_changed)}


def _scale_fn(units: torch.Tensor, factor: float, stats: ScaleStats, track: bool):
    """The hook body for one layer.

    The selected units are multiplied through a per-unit scale vector (1 elsewhere), so
    the whole edit is one kernel: in place for float32 activations without autograd, and
    ``(x.float() * scale).to(dtype)`` otherwise. Multiplying by exactly 1.0 is exact, so
    untouched units stay bit-identical. Changed values are counted on multi-token
    forwards (the prompt pass of each ``generate`` call), which is enough for the no-op
    guard and keeps the per-token cost at one multiply.
    """
    cache: dict[tuple[torch.device, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def fn(x: torch.Tensor) -> torch.Tensor:
        """x: [batch, pos, width] -> same shape, selected units scaled (product in float32)."""
        key = (x.device, x.shape[-1])
        if key not in cache:
            scale = torch.ones(x.shape[-1], dtype=torch.float32, device=x.device)
            scale[units.to(x.device)] = factor
            cache[key] = (units.to(x.device), scale)
        idx, scale = cache[key]
        count = track and x.dim() >= 2 and x.shape[-2] > 1
        old = x.index_select(-1, idx) if count else None
        if x.dtype == torch.float32 and not (torch.is_grad_enabled() and x.requires_grad):
            out = x.mul_(scale)
        else:
            out = (x.to(torch.float32) * scale).to(x.dtype)
        stats.calls += 1
        if old is not None:
            stats.values_seen = stats.values_seen + old.numel()
            stats.values_changed = stats.values_changed + (out.index_select(-1, idx) != old).sum()
        return out

    return fn


@contextmanager
def scaled_units(model: nn.Module, neurons: NeuronSet, factor: float = PAPER_FACTOR, *, track: bool = True) -> Iterator[ScaleStats]:
    """Within the block, every forward of ``model`` sees the units of ``neurons`` scaled by ``factor``."""
    factor = validate_factor(factor)
    check_against_model(neurons, model)
    stats = ScaleStats()
    handles = []
    try:
        for layer, units in sorted(neurons.by_layer().items()):
            index = torch.tensor(sorted(units), dtype=torch.long)
            handles.append(attach(model, neurons.hook, layer, _scale_fn(index, factor, stats, track)))
        yield stats
    finally:
        for handle in handles:
            handle.remove()


@functools.lru_cache(maxsize=256)  # the runner asks for the main factor more than once (placebo decision, guard)
def dtype_noop_fraction(factor: float, dtype: torch.dtype) -> float:
    """Fraction of finite values ``x`` of ``dtype`` with ``cast(float32(x) * factor) != x``.

    Exact for 16-bit dtypes (all 65,536 bit patterns are tried); for float32 and wider,
    any factor that differs from 1 in float32 changes some values, and the result is 1.0
    if ``float32(factor) != 1`` else 0.0. A result of 0.0 means the intervention is a
    no-op in that dtype whatever the activations are.

    >>> dtype_noop_fraction(1 - 1e-6, torch.bfloat16)
    0.0
    >>> dtype_noop_fraction(0.5, torch.bfloat16) > 0.99
    True
    """
    factor = validate_factor(factor)
    if torch.finfo(dtype).bits != 16:
        return 0.0 if torch.tensor(factor, dtype=torch.float32).item() == 1.0 else 1.0
    patterns = torch.arange(0, 1 << 16, dtype=torch.int32).to(torch.int16).view(dtype)
    values = patterns[torch.isfinite(patterns) & (patterns != 0)]
    changed = (values.to(torch.float32) * factor).to(dtype) != values
    return float(changed.double().mean())
