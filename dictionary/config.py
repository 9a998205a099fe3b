"""``DictionaryConfig``: every setting of ``probe dictionary``, checked before anything is loaded.

Its fields make the command's options (:mod:`probe_cli.options`) and its ``--config`` keys; a plain
``DictionaryConfig(...)`` is what :func:`dictionary.run.dictionary_run` takes from Python or from ``probe replicate``.
Kept free of torch so that ``probe --help`` stays fast.

Example:
    >>> config = DictionaryConfig(kind="diff-sae", tokens=100_000)
    >>> config.hook, config.latents(576), config.active()
    ('resid_post', 1152, 16)
    >>> DictionaryConfig(kind="sae")
    Traceback (most recent call last):
    core.config_file.OptionError: --kind: expected one of crosscoder, diff-sae, got 'sae'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from access.hook_table import HOOK_POINTS, RESID_POST
from core.config_fields import nested, option
from core.config_file import POSITIVE, SEED, Range, choice, typed_config
from core.config_init import flat_init
from core.pair_dirs import PairDirs

DICTIONARY_KINDS: tuple[str, ...] = ("crosscoder", "diff-sae")
PATCH_INTO: tuple[str, ...] = ("sft", "dpo")
DEFAULT_HOOK = RESID_POST
DEFAULT_EXPANSION = {"crosscoder": 4, "diff-sae": 2}
DEFAULT_K = {"crosscoder": 32, "diff-sae": 16}


@flat_init
@dataclass(frozen=True)
@typed_config
class DictionaryConfig:
    """What to learn (kind, site, size), on which text, and which controls and causal tests to run."""

    kind: str = option("crosscoder", "crosscoder (both models, one decoder each) or diff-sae (an SAE on DPO − SFT).")
    models: PairDirs = nested(PairDirs, only=("sft_dir", "dpo_dir"))
    layer: Annotated[int, Range(0, 100_000)] | None = option(
        None, "Layer read (default: the middle of the depth-scaled window, analysis.window).", shown_default="middle"
    )
    hook: str = option(DEFAULT_HOOK, "Hook point read at that layer.")
    text: str | Path | None = option(
        None, "Your text: a UTF-8 .txt/.md file or a folder of them (replaces the installed prose)."
    )
    chat_data: str | Path | None = option(
        None, "The pair's chat data (a folder with sft.jsonl/dpo.jsonl); --pair fills it.", flag="--chat-data"
    )
    tokens: Annotated[int, Range(1000, 2**32)] = option(2_000_000, "Activations harvested (training and held out).")
    context: Annotated[int, Range(8, 8192)] = option(512, "Longest sequence fed to the models; longer text is cut.")
    expansion: Annotated[int, Range(1, 1024)] | None = option(
        None, "Latents per activation dimension (default: 4 for the crosscoder, 2 for the diff-SAE)."
    )
    k: Annotated[int, POSITIVE] | None = option(
        None, "BatchTopK's mean active latents per token (default: 32 crosscoder, 16 diff-SAE)."
    )
    batch_size: Annotated[int, POSITIVE] = option(2048, "Tokens per training step.")
    epochs: Annotated[int, Range(1, 100)] = option(1, "Passes over the training tokens.")
    null: bool = option(True, "Also train the null dictionary (SFT against SFT) for the crosscoder.")
    causal: bool = option(True, "Patch latent sets and measure the KL gap closed (needs the held-out rows).")
    capability: str = option("multi_turn", "Capability whose held-out rows the causal test teacher-forces.")
    causal_rows: Annotated[int, POSITIVE] | None = option(None, "Use only the first N of those rows.")
    patch_into: str = option(
        "sft", "Model whose activations get the other's latents (sft: Minder et al.'s base + chat latents)."
    )
    placebos: Annotated[int, Range(0, 1000)] = option(19, "Matched random latent sets per set size.")
    cards: Annotated[int, Range(0, 1000)] = option(24, "Latents given a card (the most model-specific first).")
    max_batch_tokens: Annotated[int, POSITIVE] = option(4096, "Padded tokens per harvest forward.")
    shard_tokens: Annotated[int, POSITIVE] = option(16384, "Activations per store shard (what a kill can lose).")
    seed: Annotated[int, SEED] = option(0, "Seed of the held-out draw, the dictionary and the placebo sets.")
    device: str | None = option(None, "cpu or cuda (default: cuda if available).")
    out_dir: str | Path | None = option(None, "Output folder (default: runs/dictionary-<time>).", flag="--out")

    def __post_init__(self) -> None:
        for name, allowed in (("kind", DICTIONARY_KINDS), ("hook", HOOK_POINTS), ("patch_into", PATCH_INTO)):
            object.__setattr__(self, name, choice(name, getattr(self, name), allowed))

    def latents(self, d: int) -> int:
        return d * (self.expansion or DEFAULT_EXPANSION[self.kind])

    def active(self) -> int:
        return self.k or DEFAULT_K[self.kind]
