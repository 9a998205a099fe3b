"""The coherence guard: how fluent an arm's output still is, as its perplexity under the SFT model.

An edit strong enough to move compliance may do it by breaking the text (an amplification at a large alpha, an ablation
of many units). Each arm's generated responses, and its model's baseline responses, are teacher-forced once through
the SFT model after their prompts; the guard is the **perplexity** ``exp(total NLL / total tokens)`` over every
generated token of every row (rows that generated nothing are left out), reported beside compliance. A dose that
breaks the text shows as a perplexity far above the baseline's. The SFT model is the judge of fluency because it is
the pair's common reference; nothing here is a threshold: the number is shown, not turned into a verdict.

Example:
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> _ = torch.manual_seed(0)
    >>> sft = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16,
    ...                                    num_attention_heads=2, num_hidden_layers=1))
    >>> ppl, tokens = output_perplexity(sft, [[1, 2, 3], [4, 5]], [[6, 7], []])
    >>> tokens, 20 < ppl < 50   # a random 32-token model: close to 32
    (2, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

from access.outcomes import Forced, forced_logits, pack
from core.errors import ProbeError
from interventions.results import Coherence

if TYPE_CHECKING:
    from transformers import PreTrainedModel

JUDGE = "sft"  # the model whose perplexity the guard reads


def output_perplexity(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    outputs: Sequence[Sequence[int]],
    max_batch_tokens: int = 2048,
    batch_size: int = 16,
) -> tuple[float, int]:
    """``(exp(total NLL / total tokens), total tokens)`` of ``outputs`` after their ``prompts`` under ``model``
    (NaN and 0 when nothing was generated)."""
    seqs = [Forced((*p, *o), len(o)) for p, o in zip(prompts, outputs, strict=True) if o and p]
    if not seqs:
        return float("nan"), 0
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in pack(seqs, max_batch_tokens, batch_size):
            chosen = [seqs[i] for i in batch]
            logits = forced_logits(model, chosen)
            keep = logits.shape[1] - 1
            for row, seq in enumerate(chosen):
                n = seq.n_response
                log_p = torch.log_softmax(logits[row, keep - n : keep].double(), dim=-1)
                targets = torch.tensor(seq.ids[-n:], device=log_p.device)
                total -= float(log_p.gather(-1, targets[:, None]).sum())
                count += n
    return math.exp(total / count), count


def arm_coherence(
    model_of: Callable[[str], PreTrainedModel],
    prompts: Sequence[Sequence[int]],
    baseline: Sequence[Sequence[int]],
    generated: Sequence[Sequence[int]],
    known: dict[str, float],
    model: str,
) -> Coherence | None:
    """An arm of ``model``'s coherence guard: the perplexity of its ``generated`` token ids beside that of ``model``'s
    ``baseline`` ones (worked out once per model, kept in ``known``); None where the SFT model cannot be loaded."""
    try:
        judge = model_of(JUDGE)
    except ProbeError:
        return None
    if model not in known:
        known[model] = output_perplexity(judge, prompts, baseline)[0]
    perplexity, tokens = output_perplexity(judge, prompts, generated)
    return Coherence(perplexity, known[model], tokens, JUDGE)
