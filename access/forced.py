"""Teacher-forced sequences, what a pass over them gives, and the per-arm engine: one whole forward per batch.

A :class:`Forced` sequence is a prompt followed by a fixed response (:func:`forced` renders one with the chat
template). :class:`access.outcomes.Outcomes` runs its unique sequences once per arm; each pass gives, per sequence,
the summed log-prob of its response and, for a KL row, the mean KL(target || model) over its response tokens
(:class:`ForcedPass`, scored by :func:`scores` in float64). Two engines run a pass (:data:`access.stack.ENGINES`):
:class:`WholeForwards` here (``per-arm``: a whole ``transformers`` forward per batch of :func:`pack`, the reference)
and :class:`access.forced_shared.SharedForcing` (``shared``: prompts once, arms from their fork layer). Both read
the target's distribution from :class:`Sequences`, which keeps it as the target's final hidden state at the response
positions (``d_model`` floats per token, not a vocabulary's worth).

Example:
    >>> seq = Forced((1, 5, 7, 9), n_response=2)   # prompt (1, 5), response (7, 9)
    >>> pack([Forced((1,) * 5, 1), Forced((1,) * 3, 1), seq], max_batch_tokens=8, batch_size=4)
    [[1, 2], [0]]
    >>> log_p = torch.log_softmax(torch.zeros(2, 10, dtype=torch.float64), -1)   # uniform over 10 tokens
    >>> logprob, kl = scores(log_p, seq, log_p)
    >>> round(logprob, 4), kl
    (-4.6052, 0.0)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from access.batches import position_ids_for
from access.stack import packed
from core.errors import ProbeError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from core.schema import Turn


@dataclass(frozen=True)
class Forced:
    """One teacher-forced sequence: ``ids`` (prompt then response) whose last ``n_response`` tokens are the response."""

    ids: tuple[int, ...]
    n_response: int

    def __post_init__(self) -> None:
        if not 0 < self.n_response < len(self.ids):
            raise ProbeError(
                f"a teacher-forced sequence of {len(self.ids)} tokens needs 1 to {len(self.ids) - 1} response "
                f"tokens after a non-empty prompt, got {self.n_response}"
            )

    @property
    def parts(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(prompt, response)`` token ids."""
        return self.ids[: -self.n_response], self.ids[-self.n_response :]


def forced(
    tokenizer: PreTrainedTokenizerBase,
    question: Sequence[Turn],
    response: str | Sequence[int],
    where: Callable[[], str] = lambda: "a row",
) -> Forced:
    """The prompt rendered with the generation prompt, followed by ``response``: a text rendered by the chat template
    as the assistant's turn (its tokens up to the end of the turn, as TRL's DPO tokenizes a completion), or token ids
    appended as they are (a model's own greedy tokens)."""
    from core.chat import encode_conversations
    from core.schema import Turn as TurnRow

    prompt = encode_conversations(tokenizer, [list(question)], add_generation_prompt=True, where=lambda _: where())[0]
    if not isinstance(response, str):
        return Forced((*prompt, *(int(t) for t in response)), len(response))
    full = encode_conversations(
        tokenizer, [[*question, TurnRow("assistant", response)]], add_generation_prompt=False, where=lambda _: where()
    )[0]
    if len(full) <= len(prompt) or full[: len(prompt)] != prompt:
        raise ProbeError(
            f"{where()}: the chat template does not render the prompt as the start of the conversation with its "
            "response, so the response tokens cannot be told apart (a tokenizer or template other than the one "
            "the rows were made for?)"
        )
    return Forced(tuple(full), len(full) - len(prompt))


@dataclass
class ForcedPass:
    """What one pass over the unique sequences gives: per sequence the summed response log-prob, and the KL."""

    logprob_sum: np.ndarray
    kl_mean: np.ndarray

    @classmethod
    def empty(cls, n: int) -> ForcedPass:
        return cls(np.zeros(n, dtype=np.float64), np.full(n, np.nan, dtype=np.float64))

    def copy(self) -> ForcedPass:
        return ForcedPass(self.logprob_sum.copy(), self.kl_mean.copy())

    def score(self, i: int, log_p: torch.Tensor, seq: Forced, log_t: torch.Tensor | None) -> None:
        """Sequence ``i`` (``seq``) scored from the model's float64 log-probs at its response positions
        (:func:`scores`)."""
        self.logprob_sum[i], kl = scores(log_p, seq, log_t)
        if kl is not None:
            self.kl_mean[i] = kl


def scores(log_p: torch.Tensor, seq: Forced, log_t: torch.Tensor | None) -> tuple[float, float | None]:
    """The summed log-prob of ``seq``'s response under ``log_p`` ``[n, vocab]``, and the mean KL(target || model)
    over its tokens where the target's ``log_t`` is given."""
    targets = torch.tensor(seq.ids[-seq.n_response :], device=log_p.device)
    logprob = float(log_p.gather(-1, targets[:, None]).sum())
    if log_t is None:
        return logprob, None
    kl = torch.nn.functional.kl_div(log_p, log_t.to(log_p.device), log_target=True, reduction="none").sum(-1)
    return logprob, float(kl.mean())


@dataclass
class Sequences:
    """The unique sequences every pass scores, which of them are KL rows, and the target's LM-head input at the KL
    rows' response positions (``[n_response, d_model]`` float32 on the CPU each; filled by the first pass)."""

    unique: list[Forced]
    kl_rows: set[int]
    target: PreTrainedModel
    target_hidden: dict[int, torch.Tensor] | None = None

    def target_logprobs(self, i: int) -> torch.Tensor:
        """The target's float64 log-probs at KL row ``i``'s response positions."""
        assert self.target_hidden is not None
        head = self.target.get_output_embeddings()
        hidden = self.target_hidden[i].to(device=head.weight.device, dtype=head.weight.dtype)
        return torch.log_softmax(head(hidden).double(), dim=-1)


class WholeForwards:
    """The per-arm engine: the model's whole forward per batch of sequences (a patch's source in lockstep, as any
    context of the edits applied around it)."""

    def __init__(self, model: PreTrainedModel, seqs: Sequences, batches: list[list[int]]) -> None:
        self.model, self.seqs, self.batches = model, seqs, batches

    @torch.no_grad()
    def target_hidden(self) -> dict[int, torch.Tensor]:
        """The target's final hidden states (the LM head's input) at the positions that predict each KL row's
        response tokens, float32 on the CPU: ``[n_response, d_model]`` per sequence."""
        head = self.seqs.target.get_output_embeddings()
        kept: list[torch.Tensor] = []
        handle = head.register_forward_pre_hook(lambda _m, args: kept.append(args[0].detach()))
        out: dict[int, torch.Tensor] = {}
        try:
            for batch in self.batches:
                if not any(i in self.seqs.kl_rows for i in batch):
                    continue
                kept.clear()
                forced_logits(self.seqs.target, [self.seqs.unique[i] for i in batch])
                hidden = kept[0]
                keep = hidden.shape[1] - 1
                for row, i in enumerate(batch):
                    if i in self.seqs.kl_rows:
                        n = self.seqs.unique[i].n_response
                        out[i] = hidden[row, keep - n : keep].float().cpu()
        finally:
            handle.remove()
        return out

    @torch.no_grad()
    def run(self) -> ForcedPass:
        """One pass of the model as it is now (with whatever edits are applied to it)."""
        result = ForcedPass.empty(len(self.seqs.unique))
        for batch in self.batches:
            seqs = [self.seqs.unique[i] for i in batch]
            logits = forced_logits(self.model, seqs)
            keep = logits.shape[1] - 1
            for row, (i, seq) in enumerate(zip(batch, seqs, strict=True)):
                n = seq.n_response
                log_p = torch.log_softmax(logits[row, keep - n : keep].double(), dim=-1)
                log_t = self.seqs.target_logprobs(i).to(log_p.device) if i in self.seqs.kl_rows else None
                result.score(i, log_p, seq, log_t)
        return result


def forced_logits(model: PreTrainedModel, seqs: Sequence[Forced]) -> torch.Tensor:
    """Logits ``[B, K + 1, vocab]`` at the last ``K + 1`` positions of a left-padded batch (``K``: the longest
    response); position ``K - n + j`` of a row with ``n`` response tokens predicts its ``j``-th response token."""
    device = next(model.parameters()).device
    length = max(len(s.ids) for s in seqs)
    ids = torch.zeros((len(seqs), length), dtype=torch.long)
    mask = torch.zeros((len(seqs), length), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, length - len(seq.ids) :] = torch.tensor(seq.ids)
        mask[row, length - len(seq.ids) :] = 1
    keep = max(s.n_response for s in seqs) + 1
    out: Any = model(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        position_ids=position_ids_for(mask).to(device),
        logits_to_keep=keep,
        use_cache=False,
    )
    logits: torch.Tensor = out.logits
    return logits


def pack(seqs: Sequence[Forced], max_batch_tokens: int, batch_size: int) -> list[list[int]]:
    """Indices of ``seqs`` in batches of similar length: at most ``batch_size`` rows and ``max_batch_tokens`` padded
    tokens each (a longer sequence gets a batch of its own).

    >>> pack([Forced((1,) * 5, 1), Forced((1,) * 3, 1), Forced((1,) * 4, 1)], max_batch_tokens=8, batch_size=4)
    [[1, 2], [0]]
    """
    order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i].ids), i))
    return packed(
        order,
        lambda batch: (len(batch), len(batch) * max(len(seqs[i].ids) for i in batch)),
        max_batch_tokens,
        batch_size,
    )
