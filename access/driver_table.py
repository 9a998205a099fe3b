"""The drivers: one row each, saying where its capture and edit entry points live and what it can do.

Importing this table loads no driver (and not torch): :mod:`access.drivers.base` loads a row's entry points on use.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import ProbeError


@dataclass(frozen=True)
class Driver:
    """Where one driver's capture and edit entry points live (``module:attribute``); ``edit=None``: capture only."""

    capture: str
    edit: str | None = None
    greedy_only: bool = False  # reads tokens from raw logits, so cannot sample
    shares_batches: bool = False  # its edits are plain hooks, as the shared engine (access.shared_generation) attaches


DRIVERS: dict[str, Driver] = {
    "torch": Driver(
        "access.drivers.torch_hooks:TorchBackend", "access.drivers.torch_hooks:generate", shares_batches=True
    ),
    "transformer_lens": Driver("access.drivers.tl_bridge:TransformerLensBackend"),
    "nnsight": Driver(
        "access.drivers.nnsight_trace:NNsightBackend", "access.drivers.nnsight_trace:generate", greedy_only=True
    ),
}
EDITING_DRIVERS: tuple[str, ...] = tuple(name for name, driver in DRIVERS.items() if driver.edit)
DEFAULT_DRIVER = "torch"  # plain hooks: captures and edits, and shares batches


def driver(name: str) -> Driver:
    if name not in DRIVERS:
        raise ProbeError(f"unknown backend {name!r}; expected one of {', '.join(DRIVERS)}")
    return DRIVERS[name]


def editing_driver(name: str, do_sample: bool = False) -> Driver:
    """Driver ``name`` if it can edit (and sample, when asked to); otherwise one line saying which can."""
    entry = driver(name)
    if entry.edit is None:
        raise ProbeError(
            f"the {name} backend captures only and cannot apply edits; use --backend {' or '.join(EDITING_DRIVERS)}"
        )
    if do_sample and entry.greedy_only:
        raise ProbeError(
            f"the {name} backend decodes greedily only; use --backend {DEFAULT_DRIVER} for seeded sampling"
        )
    return entry
