"""Drivers: ``torch`` (plain hooks, default; captures and edits), ``transformer_lens`` (captures),
``nnsight`` (captures and edits). :mod:`access.driver_table` holds their rows.

Modules:
    base            the capture-and-edit contract, the entry points a row names loaded on use, what recorders share
    torch_hooks     plain PyTorch hooks on the Hugging Face modules, to capture and to edit
    tl_bridge       TransformerLens's TransformerBridge hooks on the raw Hugging Face weights, to capture
    nnsight_trace   one ``trace`` per batch to capture, ``generate``'s ``tracer.all()`` to edit
"""

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
