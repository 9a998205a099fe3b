"""The coherence guard: how fluent an arm's output still is, as its perplexity under the SFT model.

An edit strong enough to move compliance may do it by breaking the text (an amplification at a large alpha, an ablation
of many units). Each arm's generated responses, and its model's baseline responses, are teacher-forced once through the
SFT model after their prompts (a row an arm generated as its baseline did is read back, not run again, and so is a row
the continuous outcomes already teacher-forced through SFT, :meth:`interventions.outcome_runs.OutcomeRuns.scored_by`:
where the outcomes of an arm on DPO run, their target pass runs the target rows' prompts through SFT anyway and scores
there SFT's own greedy responses for the KL and the baseline's and the arms' other responses for this guard); the guard
is the
**perplexity** ``exp(total NLL / total tokens)`` over every generated token of every row (rows that generated nothing
are left out), reported beside compliance. A dose that breaks the text shows as a perplexity far above the baseline's.
The SFT model is the judge of fluency because it is the pair's common reference; nothing here is a threshold: the number
is shown, not turned into a verdict.

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
from core.clock import COHERENCE, timed
from core.errors import ProbeError
from interventions.results import Coherence

if TYPE_CHECKING:
    from transformers import PreTrainedModel

JUDGE = "sft"  # the model whose perplexity the guard reads


PromptOutput = tuple[tuple[int, ...], tuple[int, ...]]  # a (prompt, output) pair of token ids


def output_perplexity(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    outputs: Sequence[Sequence[int]],
    max_batch_tokens: int = 2048,
    batch_size: int = 16,
    known: dict[PromptOutput, float] | None = None,
) -> tuple[float, int]:
    """``(exp(total NLL / total tokens), total tokens)`` of ``outputs`` after their ``prompts`` under ``model``
    (NaN and 0 when nothing was generated). ``known``: each (prompt, output) row's NLL under ``model`` worked out
    before, read instead of run again, and the rows run here added to it."""
    known = {} if known is None else known
    rows = [(tuple(p), tuple(o)) for p, o in zip(prompts, outputs, strict=True) if o and p]
    if not rows:
        return float("nan"), 0
    missing = list(dict.fromkeys(row for row in rows if row not in known))
    if missing:
        known.update(zip(missing, _nll(model, missing, max_batch_tokens, batch_size), strict=True))
    count = sum(len(output) for _, output in rows)
    return math.exp(sum(known[row] for row in rows) / count), count


@timed(COHERENCE)
def _nll(model: PreTrainedModel, rows: Sequence[PromptOutput], max_batch_tokens: int, batch_size: int) -> list[float]:
    """Each row's output NLL (nats, summed over its tokens) after its prompt under ``model``, in batches."""
    seqs = [Forced((*p, *o), len(o)) for p, o in rows]
    nll = [0.0] * len(seqs)
    with torch.no_grad():
        for batch in pack(seqs, max_batch_tokens, batch_size):
            logits = forced_logits(model, [seqs[i] for i in batch])
            keep = logits.shape[1] - 1
            for row, i in enumerate(batch):
                n = seqs[i].n_response
                log_p = torch.log_softmax(logits[row, keep - n : keep].double(), dim=-1)
                targets = torch.tensor(seqs[i].ids[-n:], device=log_p.device)
                nll[i] = -float(log_p.gather(-1, targets[:, None]).sum())
    return nll


def arm_coherence(
    model_of: Callable[[str], PreTrainedModel],
    prompts: Sequence[Sequence[int]],
    baseline: Sequence[Sequence[int]],
    generated: Sequence[Sequence[int]],
    known: dict[PromptOutput, float],
) -> Coherence | None:
    """An arm's coherence guard: the perplexity of its ``generated`` token ids beside that of its model's ``baseline``
    ones; None where the SFT model cannot be loaded. ``known`` (one per run: the judge is always SFT) keeps every
    row's NLL, so the baseline runs once and an arm runs only the rows its edit changed (on the default A/B the main
    arm changes none of 36 rows and the factor-0 control 8: 44 rows teacher-forced instead of 144), and it holds the
    rows the outcomes scored under SFT already (on the default A/B all 44: 26 of the DPO baseline's 36 are SFT's own
    responses, the KL's, and the outcomes' target pass scores the other 18 over the same prompts)."""
    try:
        judge = model_of(JUDGE)
    except ProbeError:
        return None
    before = output_perplexity(judge, prompts, baseline, known=known)[0]
    perplexity, tokens = output_perplexity(judge, prompts, generated, known=known)
    return Coherence(perplexity, before, tokens, JUDGE)
