"""Whether a scaling factor is a no-op in a dtype (the factors: :mod:`access.factors`; scaling units:
:func:`access.edits.scaled_units`)."""

from __future__ import annotations

import functools

import torch

from access.factors import validate_factor
from access.sites import EditStats

ScaleStats = EditStats  # the former name


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
