"""``PairEvalConfig``: what :func:`training.evaluate.evaluate_pair` judges and how it generates.

Its fields make the options of ``probe models eval`` (:mod:`probe_cli.options`). Kept apart from
:mod:`training.evaluate` so that the command line reads it without torch.

Example:
    >>> config = PairEvalConfig(test_file="data/test.jsonl", max_rows=200)   # models: the default pair's
    >>> config.generation.max_new_tokens, config.generation.batch_size
    (64, 64)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from core.config_fields import nested, option
from core.config_file import POSITIVE, choice, typed_config
from core.config_init import flat_init
from core.decoding import EVAL_GENERATION, GenerationConfig
from core.pair_dirs import PairDirs

SPLITS: tuple[str, ...] = ("heldout", "test")
HELDOUT, DEFAULT_SPLIT = "heldout", "heldout"  # the held-out split's name; what evaluations read by default


@flat_init
@dataclass(frozen=True)
@typed_config
class PairEvalConfig:
    """The models and test rows to judge, how many rows, and the greedy generation (``EVAL_GENERATION``)."""

    test_file: str | Path = option(
        help="Test JSONL (default: the held-out split, or the pair's test.jsonl with --split test).", flag="--test"
    )
    models: PairDirs = nested(PairDirs)
    max_rows: Annotated[int, POSITIVE] | None = option(None, "Judge at most N rows, spread over tasks.")
    split: str = option(
        DEFAULT_SPLIT,
        "Which split when no --test is given: heldout (never trained on; constraints, carry-over, priority triples) "
        "or test (the pair's test.jsonl, from the training distribution).",
    )
    generation: GenerationConfig = nested(
        GenerationConfig, default_factory=lambda: EVAL_GENERATION, only=["max_new_tokens", "batch_size"]
    )

    def __post_init__(self) -> None:
        choice("split", self.split, SPLITS)
