"""``ExplainConfig``: what :func:`analysis.explain.explain_run` explains, with which models, and what it writes.

Its fields make the options of ``probe explain`` (:mod:`probe_cli.options`). Kept apart from
:mod:`analysis.explain` so that the command line reads it without torch or h5py.

Example:
    >>> config = ExplainConfig(capability="multi_turn", top=10)
    >>> config.hooks, config.permutations
    (None, 1000)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from core.config_fields import nested, option
from core.config_file import PERMUTATIONS, POSITIVE, SEED, typed_config
from core.config_init import flat_init
from core.pair_dirs import PairDirs


@flat_init
@dataclass(frozen=True)
@typed_config
class ExplainConfig:
    """Which units (capability, hook points, the top ``top``), which checkpoints, how much to keep, where to write.
    ``capability`` None: the one the analysis holds (an error naming them when it holds several); ``hooks`` None:
    every hook point it analysed for the capability. ``top`` is checked again where it is used (against the units
    the analysis ranked)."""

    capability: str | None = option(
        None, "Capability to explain (default: the one the analysis holds).", aliases=["-c"]
    )
    top: Annotated[int, POSITIVE] = option(20, "Units explained, by |Δ| of the analysis's metric within its window.")
    hooks: list[str] | None = option(
        None, "Hook point (repeatable); default: every analysed one.", flag="--hook", repeat=True
    )
    models: PairDirs = nested(PairDirs)
    tokens: Annotated[int, POSITIVE] = option(10, "Promoted and suppressed tokens kept per read-out.")
    prompts: Annotated[int, POSITIVE] = option(3, "Most-activating prompts kept per unit and model.")
    permutations: Annotated[int, PERMUTATIONS] = option(1000, "Permutations for each layer's rank-correlation p-value.")
    seed: Annotated[int, SEED] = option(0, "Seed of the bootstrap CIs and the permutations.")
    analysis_dir: str | Path | None = option(
        None, "Where `probe analyze` wrote (default: RUN_DIR/analysis).", flag="--analysis"
    )
    out_dir: str | Path | None = option(None, "Output directory (default: beside the analysis).", flag="--out")
    plots: bool = option(True, "Write the weight-change and agreement figures.")
    png: bool | None = option(False, "Also export the figures as PNG (needs Chromium).")  # None: when it is there
