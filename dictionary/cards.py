"""Per-latent cards, drawn by ``probe explain``'s own card code, so that a latent and a neuron read alike.

A latent's card is an :class:`analysis.explain_record.NeuronCard` rendered by
:func:`analysis.explain_html.card_html`: its "unit" is the latent; its ranks are by relative decoder norm (most
DPO-leaning first; for the diff-SAE by activation mass) and by firing rate on the held-out tokens; its values are its
decoder norms in SFT and DPO (the diff-SAE: 0 and its norm), the relative norm in the Δ slot; its read-out is the
direction it writes in the DPO model read through the DPO model's final norm and unembedding
(:func:`analysis.readout.read_out`; for an ``mlp_post`` site, through that layer's ``down_proj`` first); and its
"prompts" are its top-activating held-out tokens, each with the text before it (``⟦token⟧`` marks the token) and the
latent's contribution ``f · ‖d‖`` in each model.

Example:
    >>> snippet("To be, or not to", " be")
    'To be, or not to⟦ be⟧'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from access.hook_table import HOOK_TABLE

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from analysis.explain_record import NeuronCard
    from dictionary.text import TextMix

SNIPPET_TOKENS = 24


def snippet(before: str, token: str) -> str:
    return f"{before}⟦{token}⟧"


@dataclass(frozen=True)
class LatentFacts:
    """What a card says of one latent, already computed."""

    latent: int
    relative_norm: float
    norms: tuple[float, float]  # decoder norms (sft, dpo) in activation units
    ranks: dict[str, int]  # rank name -> 1-based rank among all latents
    top: list[tuple[float, int, int]]  # (activation, sequence, position) on held-out tokens


def cards(
    facts: list[LatentFacts],
    directions: np.ndarray,
    dpo_dir: Path,
    hook: str,
    layer: int,
    mix: TextMix,
    tokenizer: PreTrainedTokenizerBase,
    tokens: int = 10,
) -> list[NeuronCard]:
    """One card per latent of ``facts``; ``directions[i]`` what latent ``facts[i]`` writes in the DPO model."""
    from analysis.checkpoint import Checkpoint
    from analysis.explain_record import NeuronCard
    from analysis.readout import Lens, TokenText, read_out

    with Checkpoint(dpo_dir, "--dpo") as checkpoint:
        vectors = directions.astype(np.float64)
        if HOOK_TABLE[hook].width == "d_mlp":
            vectors = vectors @ checkpoint.mlp_weight(layer, "down").numpy().astype(np.float64).T
        readouts = read_out(Lens.of(checkpoint), vectors, k=tokens, decode=TokenText(dpo_dir, "--dpo"))
    out = []
    for fact, readout in zip(facts, readouts, strict=True):
        out.append(
            NeuronCard(
                layer=layer,
                unit=fact.latent,
                ranks=fact.ranks,
                delta=fact.relative_norm,
                ci_low=float("nan"),
                ci_high=float("nan"),
                p=float("nan"),
                q=float("nan"),
                sft=fact.norms[0],
                dpo=fact.norms[1],
                weight_change={},
                readout=readout,
                top_prompts={"held-out": _hits(fact, mix, tokenizer)},
            )
        )
    return out


def _hits(fact: LatentFacts, mix: TextMix, tokenizer: PreTrainedTokenizerBase) -> list:  # type: ignore[type-arg]
    from analysis.explain_record import PromptHit

    hits = []
    for value, sequence, position in fact.top:
        seq = mix.sequences[sequence]
        before = str(tokenizer.decode(list(seq.ids[max(0, position - SNIPPET_TOKENS) : position])))
        token = str(tokenizer.decode([seq.ids[position]]))
        hits.append(
            PromptHit(
                row=sequence,
                sample_id=position,
                task=seq.source,
                sft=value * fact.norms[0],
                dpo=value * fact.norms[1],
                prompt_tail=snippet(before, token),
                distinct_tail=snippet(before[-60:], token),
            )
        )
    return hits
