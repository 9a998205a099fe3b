"""The drivers: one row each, saying where its capture and edit entry points live and what it can do.

Importing this table loads no driver (and not torch): :mod:`access.drivers.base` loads a row's entry points on use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.errors import ProbeError


@dataclass(frozen=True)
class Driver:
    """Where one driver's capture and edit entry points live (``module:attribute``); ``edit=None``: capture only."""

    capture: str
    edit: str | None = None
    greedy_only: bool = False  # reads tokens from raw logits, so cannot sample
    shares_batches: bool = False  # its edits are plain hooks, as the shared engine (access.shared_generation) attaches
    sees_logit_edits: bool = True  # decodes from the model's own output logits, so an edit of them (lda) steers it


DRIVERS: dict[str, Driver] = {
    "torch": Driver(
        "access.drivers.torch_hooks:TorchBackend", "access.drivers.torch_hooks:generate", shares_batches=True
    ),
    "transformer_lens": Driver("access.drivers.tl_bridge:TransformerLensBackend"),
    "nnsight": Driver(
        "access.drivers.nnsight_trace:NNsightBackend",
        "access.drivers.nnsight_trace:generate",
        greedy_only=True,
        sees_logit_edits=False,  # reads each token off the LM head's output, before a logit edit applies
    ),
}
EDITING_DRIVERS: tuple[str, ...] = tuple(name for name, driver in DRIVERS.items() if driver.edit)
DEFAULT_DRIVER = "torch"  # plain hooks: captures and edits, and shares batches


def driver(name: str) -> Driver:
    if name not in DRIVERS:
        raise ProbeError(f"unknown backend {name!r}; expected one of {', '.join(DRIVERS)}")
    return DRIVERS[name]


def editing_driver(name: str, do_sample: bool = False, logit_edits: Sequence[str] = ()) -> Driver:
    """Driver ``name`` if it can edit (and sample, when asked to, and apply the edit kinds ``logit_edits``, which edit
    the model's output logits); otherwise one line saying which can."""
    entry = driver(name)
    if entry.edit is None:
        raise ProbeError(
            f"the {name} backend captures only and cannot apply edits; use --backend {' or '.join(EDITING_DRIVERS)}"
        )
    if do_sample and entry.greedy_only:
        raise ProbeError(
            f"the {name} backend decodes greedily only; use --backend {DEFAULT_DRIVER} for seeded sampling"
        )
    if logit_edits and not entry.sees_logit_edits:
        able = " or ".join(n for n in EDITING_DRIVERS if DRIVERS[n].sees_logit_edits)
        raise ProbeError(
            f"--edit {logit_edits[0]} cannot run on --backend {name}: it reads each greedy token off the LM head's "
            f"output, and {logit_edits[0]} edits the model's logits after the head; use --backend {able} for "
            f"{logit_edits[0]} (every other edit, expo and expo-units included, runs on {name})"
        )
    return entry
