"""The CLI's one place that turns "no model given" into the embedded default pair.

The library stages never start a training run on their own: a recorder or an A/B runner
is given model directories. Commands that can run without them (``probe run``,
``probe intervene``, ``probe models eval``) resolve ``--pair`` (default ``smollm2``; ``tiny``
for a quick smoke run) here, building the pair on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from core.errors import ProbeError

if TYPE_CHECKING:
    from training.default_pair import DefaultPair

PAIR_HELP = (
    "Embedded default pair used when no model is given: smollm2 (default, built on first use), "
    "tiny (fast smoke subject), planted (SmolLM2 with 16 known changed MLP units, no training: a positive "
    "control) or planted-tiny (the same on a random tiny model, seconds)."
)


def pair_option() -> Any:
    from training.default_pair import DEFAULT_PAIR

    return typer.Option(DEFAULT_PAIR, "--pair", help=PAIR_HELP)


def default_pair(name: str, progress: bool = True) -> DefaultPair:
    """The verified default pair ``name`` (built if absent)."""
    import training.default_pair as default_pairs

    return default_pairs.ensure_default_pair(pair=name, progress=progress)


def pair_sources(
    name: str, sft: Path | None, dpo: Path | None, data: Path | None, progress: bool = True
) -> tuple[Path, Path, Path]:
    """(sft, dpo, data) with the missing ones taken from the default pair ``name``."""
    if (sft is None) != (dpo is None):
        raise ProbeError("give both --sft and --dpo, or neither (to use the embedded default pair)")
    if sft is not None and dpo is not None and data is not None:
        return sft, dpo, data
    pair = default_pair(name, progress)
    return sft or pair.sft_dir, dpo or pair.dpo_dir, data or pair.test_file
