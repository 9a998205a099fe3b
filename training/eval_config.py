"""``PairEvalConfig``: what :func:`training.evaluate.evaluate_pair` judges and how it generates.

Its fields make the options of ``probe models eval`` (:mod:`probe_cli.options`). Kept apart from
:mod:`training.evaluate` so that the command line reads it without torch.

Example:
    >>> config = PairEvalConfig("runs/sft", "runs/dpo", "data/test.jsonl", max_rows=200)
    >>> config.generation.max_new_tokens, config.generation.batch_size
    (64, 32)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from core.config_fields import nested, option
from core.config_file import POSITIVE, choice, typed_config
from core.decoding import EVAL_GENERATION, GenerationConfig

SPLITS: tuple[str, ...] = ("heldout", "test")
HELDOUT, DEFAULT_SPLIT = "heldout", "heldout"  # the held-out split's name; what evaluations read by default


@dataclass(frozen=True)
@typed_config
class PairEvalConfig:
    """The models and test rows to judge, how many rows, and the greedy generation (``EVAL_GENERATION``)."""

    sft_dir: str | Path = option(help="SFT model directory (default: the default pair's).", flag="--sft")
    dpo_dir: str | Path = option(help="DPO model directory (default: the default pair's).", flag="--dpo")
    test_file: str | Path = option(
        help="Test JSONL (default: the held-out split, or the pair's test.jsonl with --split test).", flag="--test"
    )
    base_dir: str | Path | None = option(
        None, "Also judge this untouched model (default with the default pair: its pretrained base).", flag="--base"
    )
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
