"""The directions of a local (input-controlled) recording, by name: which model's blocks run on whose inputs.

Torch-free, so that configs and readers can name them without loading a model; the recording itself is
:mod:`access.local_blocks`.

==============  ==================================  ============================================
direction       recorded value                      local difference (always DPO - SFT)
==============  ==================================  ============================================
``dpo_on_sft``  DPO's block *l* on SFT's input      ``dpo_on_sft - sft``: in SFT's context
``sft_on_dpo``  SFT's block *l* on DPO's input      ``dpo - sft_on_dpo``: in DPO's context
==============  ==================================  ============================================

Example:
    >>> directions_of("both"), directions_of("none"), directions_of("sft_on_dpo")
    (('dpo_on_sft', 'sft_on_dpo'), (), ('sft_on_dpo',))
    >>> local_pair("dpo_on_sft"), local_pair("sft_on_dpo")
    (('sft', 'dpo_on_sft'), ('sft_on_dpo', 'dpo'))
"""

from __future__ import annotations

DIRECTIONS: dict[str, tuple[str, str]] = {"dpo_on_sft": ("sft", "dpo"), "sft_on_dpo": ("dpo", "sft")}
"""direction -> (source: the model whose block inputs are used, other: the model whose blocks run on them)."""

LOCAL_CHOICES: tuple[str, ...] = (*DIRECTIONS, "both", "none")
DEFAULT_LOCAL = "dpo_on_sft"


def directions_of(choice: str) -> tuple[str, ...]:
    """The directions a ``--local`` choice records (``""``, an older run's, records none)."""
    return tuple(DIRECTIONS) if choice == "both" else (choice,) if choice in DIRECTIONS else ()


def local_pair(direction: str) -> tuple[str, str]:
    """The two stored groups (before, after) whose difference is the local DPO - SFT discrepancy of ``direction``."""
    source = DIRECTIONS[direction][0]
    return (source, direction) if source == "sft" else (direction, source)
