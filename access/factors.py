"""Scaling factors: the paper's factor and the one check of a factor or a dose list a user types."""

from __future__ import annotations

import math

import numpy as np

from core.errors import ProbeError

PAPER_FACTOR: float = 1.0 - 1e-6  # the paper's scale factor (access.scaling applies it)
FLOAT32_MAX: float = float(np.finfo(np.float32).max)


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
