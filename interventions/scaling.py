"""Scaling factors: their checks, the paper's factor, and whether a factor is a no-op in a dtype.

:func:`scaled_units` is the original entry point, now one case of
:func:`interventions.edits.edits` (``Scale``): one plain PyTorch hook per layer multiplies the
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
from typing import TYPE_CHECKING

import torch

from analysis.neuron_sets import NeuronSet
from core.errors import ProbeError
from interventions.config import PAPER_FACTOR
from interventions.sites import EditStats

if TYPE_CHECKING:
    from transformers import PreTrainedModel

ScaleStats = EditStats  # the former name

FLOAT32_MAX: float = float(torch.finfo(torch.float32).max)


def validate_factor(factor: float, name: str = "--factor") -> float:
    """A real number that is finite in float32 (the edits compute in float32); anything else is a user mistake."""
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(float(factor)):
        raise ProbeError(f"{name} must be a finite number (0 ablates, 1 is no change), got {factor!r}")
    if abs(float(factor)) > FLOAT32_MAX:
        raise ProbeError(
            f"{name} {factor!r} overflows float32 (largest {FLOAT32_MAX:.4g}), in which the edit is computed; "
            "use a factor of moderate size"
        )
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
            raise ProbeError(
                f"{name} {spec!r}: {part!r} is not a number; expected a comma-separated list like 0,0.5,0.999999"
            ) from None
    if not values:
        raise ProbeError(f"{name} {spec!r}: expected at least one factor")
    return values


@contextmanager
def scaled_units(model: PreTrainedModel, neurons: NeuronSet, factor: float = PAPER_FACTOR) -> Iterator[EditStats]:
    """Within the block, every forward of ``model`` sees the units of ``neurons`` scaled by ``factor``
    (the same as ``edits(model, Scale(neurons, factor))``)."""
    from interventions.edits import Scale, edits

    with edits(model, Scale(neurons, factor)) as stats:
        yield stats


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
