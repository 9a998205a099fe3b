"""Drivers: ``torch`` (plain hooks, default; captures and edits), ``transformer_lens`` (captures),
``nnsight`` (captures and edits)."""

from access.driver_table import DRIVERS, EDITING_DRIVERS
from access.drivers.base import (
    Backend,
    HookFiringError,
    SiteEdits,
    generate_edited,
    make_backend,
    reduce_positions,
)

__all__ = [
    "DRIVERS",
    "EDITING_DRIVERS",
    "Backend",
    "HookFiringError",
    "SiteEdits",
    "generate_edited",
    "make_backend",
    "reduce_positions",
]
