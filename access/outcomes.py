"""Continuous outcomes of an edit, by teacher forcing fixed response tokens through the edited model.

Compliance read off a few greedy tokens cannot see an edit that moves a model's distribution
without flipping an argmax. These outcomes can. For each row, a fixed sequence (prompt followed
by a response) is run through the model with an arm's edits applied (:func:`access.edits.edits`,
so a ``Patch`` from the other checkpoint runs in lockstep on the same tokens), and over the
response tokens:

``kl``
    the mean over response tokens of KL(target || edited), where the target is the *other*
    checkpoint (for an arm on DPO the target is SFT, and the reverse), in nats;
``kl_unedited``
    the same for the unedited model, KL(target || model);
``gap_closed``
    ``1 - kl / kl_unedited``: 0 when the edit changes nothing on these tokens, 1 when the edited
    model matches the target there; negative when it moves away (NaN where ``kl_unedited`` is 0);
``reference_logprob`` (and ``reference_change``)
    the mean log-prob of each row's reference response under the edited model (and minus the
    unedited one);
``margin`` (and ``margin_change``)
    on DPO pairs, ``log p(chosen) - log p(rejected)``, each the **sum** over its response tokens
    as DPO's loss uses it (and minus the unedited margin).

Every log-softmax and KL is computed in float64 from the logits (whatever the model's dtype), so
that the outcome's own rounding (about 1e-16 relative) stays far below any effect it reports; a
pair whose KL is small (1e-5 nats) would otherwise read float32's rounding as a gap moved. Rows are packed
into left-padded batches once (at most ``max_batch_tokens`` padded tokens and ``batch_size``
rows each) and every pass uses the same batches, so an arm whose edits change no value
reproduces the unedited numbers bit for bit and closes exactly 0. Only logits of response
positions are computed (``logits_to_keep``); the target's distribution is kept as its final
hidden state at those positions (``d_model`` floats per token, not a vocabulary's worth) and
turned into logits by its LM head when an arm needs it. The target and the unedited model run
once, on the first arm; each arm then costs one forward of the edited model per batch.

Example:
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> from access.edits import Scale
    >>> from access.units import Neuron, NeuronSet
    >>> config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
    ...                      num_attention_heads=2, num_key_value_heads=1)
    >>> _ = torch.manual_seed(0); sft, dpo = LlamaForCausalLM(config), LlamaForCausalLM(config)
    >>> rows = [Forced((1, 5, 7, 9, 3), 2), Forced((1, 4, 8, 2), 1)]
    >>> outcomes = Outcomes(dpo, sft, rows, pairs=[(Forced((1, 5, 7), 1), Forced((1, 5, 8), 1))])
    >>> nothing = outcomes.arm(())
    >>> nothing.gap_closed.tolist(), nothing.margin_change.tolist()
    ([0.0, 0.0], [0.0])
    >>> units = NeuronSet([Neuron(0, 3), Neuron(1, 7)], hook="mlp_post")
    >>> bool((outcomes.arm([Scale(units, 0.0)]).kl != nothing.kl).all())
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from access.batches import position_ids_for
from core.errors import ProbeError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from access.drivers.base import SiteEdits
    from access.edits import Edit
    from access.forced_passes import Hidden, PromptBatch, SourceValues, Stack
    from access.lockstep import Lockstep
    from core.schema import Turn

RESPONSE_SOURCES: tuple[str, ...] = ("greedy", "reference", "chosen", "rejected", "file")


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


@dataclass(frozen=True)
class ArmOutcomes:
    """Per-row outcomes of one arm (numpy float64 arrays; rows in the order given to :class:`Outcomes`)."""

    responses: str  # which response tokens the KL rows used (greedy, reference, chosen, rejected or a file)
    kl: np.ndarray  # [rows] mean KL(target || edited) over response tokens, nats
    kl_unedited: np.ndarray  # [rows] mean KL(target || model)
    reference_logprob: np.ndarray  # [reference rows] mean log-prob of the reference response, edited
    reference_unedited: np.ndarray  # [reference rows] the same, unedited
    margin: np.ndarray  # [pairs] sum log p(chosen) - sum log p(rejected), edited
    margin_unedited: np.ndarray  # [pairs] the same, unedited
    stats: dict[str, int] = field(default_factory=dict)  # the edits' EditStats (values seen and changed)

    @property
    def gap_closed(self) -> np.ndarray:
        """[rows] ``1 - kl / kl_unedited`` (NaN where the unedited KL is 0)."""
        return row_gap_closed(self.kl, self.kl_unedited)

    @property
    def reference_change(self) -> np.ndarray:
        """[reference rows] change in the reference response's mean log-prob (edited minus unedited)."""
        change: np.ndarray = self.reference_logprob - self.reference_unedited
        return change

    @property
    def margin_change(self) -> np.ndarray:
        """[pairs] change in the DPO margin (edited minus unedited)."""
        change: np.ndarray = self.margin - self.margin_unedited
        return change


def row_gap_closed(kl: np.ndarray, kl_unedited: np.ndarray) -> np.ndarray:
    """Per row ``1 - kl / kl_unedited``; NaN where ``kl_unedited`` is 0.

    >>> row_gap_closed(np.array([0.5, 0.0, 2.0]), np.array([1.0, 0.0, 1.0])).tolist()
    [0.5, nan, -1.0]
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(kl_unedited > 0, 1.0 - kl / np.where(kl_unedited > 0, kl_unedited, 1.0), np.nan)


def gap_closed(kl: np.ndarray, kl_unedited: np.ndarray) -> float:
    """The gap closed over a set of rows, ``1 - mean(kl) / mean(kl_unedited)`` (the statistic to bootstrap over rows:
    a ratio of means, not a mean of ratios, so that rows the models already agree on do not dominate).

    >>> gap_closed(np.array([0.5, 0.0]), np.array([1.0, 0.0]))
    0.5
    """
    total = float(np.mean(kl_unedited))
    return float("nan") if total <= 0 else 1.0 - float(np.mean(kl)) / total


@dataclass
class _Pass:
    """What one pass over the unique sequences gives: per sequence the summed response log-prob, and the KL."""

    logprob_sum: np.ndarray
    kl_mean: np.ndarray

    @classmethod
    def empty(cls, n: int) -> _Pass:
        return cls(np.zeros(n, dtype=np.float64), np.full(n, np.nan, dtype=np.float64))

    def copy(self) -> _Pass:
        return _Pass(self.logprob_sum.copy(), self.kl_mean.copy())


ENGINES: tuple[str, ...] = ("auto", "shared", "full")
Progress = Callable[[int, int], None]  # (batches done, batches in all) of one call of Outcomes.arms


class Outcomes:
    """The outcomes of edits to ``model`` against ``target`` (the other checkpoint) on fixed sequences.

    ``rows``: the KL sequences (one per test row); ``reference``: sequences whose response is each row's reference
    (for ``reference_logprob``; may be ``rows`` itself); ``pairs``: (chosen, rejected) sequences of DPO pairs.
    ``responses`` names what the KL rows' responses are, for reports. Call :meth:`arms` with every arm at once (each
    batch of sequences is then prepared once for all of them), or :meth:`arm` once per arm.

    ``engine``: ``shared`` runs :mod:`access.forced_passes` (each prompt once per batch for all its responses, each
    arm from its fork layer, patch sources once per batch); ``full`` runs one whole ``transformers`` forward per
    batch per arm, a patch's source in lockstep (the engine before; the reference the tests hold ``shared`` to);
    ``auto`` (the default): ``shared`` where :func:`access.forced_passes.supports` both models, else ``full``.
    Under ``shared``, a weight blend (``expo``, ``expo-units``) runs from the lowest block it blends, a
    logit-difference arm (``lda``) scores the unedited model's logits amplified against its source's, and an arm
    whose edits bring any other context (several together, say) runs on ``full`` and is measured against the
    unedited pass by ``full`` too: every arm is a difference of two passes with the same arithmetic, so one that
    changes nothing closes exactly 0.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        target: PreTrainedModel,
        rows: Sequence[Forced],
        *,
        reference: Sequence[Forced] = (),
        pairs: Sequence[tuple[Forced, Forced]] = (),
        responses: str = "greedy",
        max_batch_tokens: int = 2048,
        batch_size: int = 16,
        engine: str = "auto",
    ) -> None:
        from access.forced_passes import Stack, prompt_batches, supports

        if getattr(model.config, "final_logit_softcapping", None) or getattr(
            target.config, "final_logit_softcapping", None
        ):
            raise ProbeError(
                "outcomes: a model with final logit soft-capping is not supported (its logits are not its LM head's)"
            )
        if model.config.vocab_size != target.config.vocab_size:
            raise ProbeError(
                f"outcomes: the target's vocabulary ({target.config.vocab_size}) is not the model's "
                f"({model.config.vocab_size})"
            )
        if engine not in ENGINES:
            raise ProbeError(f"outcomes: unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
        shared = supports(model) and supports(target)
        if engine == "shared" and not shared:
            raise ProbeError(f"outcomes: the shared engine does not run model type {model.config.model_type!r}")
        self.engine = "shared" if engine == "auto" and shared else ("full" if engine == "auto" else engine)
        self.model, self.target, self.responses = model, target, responses
        self.rows, self.reference, self.pairs = list(rows), list(reference), list(pairs)
        unique: dict[Forced, int] = {}
        for seq in [*self.rows, *self.reference, *(s for pair in self.pairs for s in pair)]:
            unique.setdefault(seq, len(unique))
        self._unique = list(unique)
        self._index = unique
        self._kl_rows = {unique[seq] for seq in self.rows}
        self._batches = pack(self._unique, max_batch_tokens, batch_size)
        self._prompt_batches = (
            prompt_batches(
                [(s.ids[: -s.n_response], s.ids[-s.n_response :]) for s in self._unique], max_batch_tokens, batch_size
            )
            if self.engine == "shared"
            else []
        )
        self._stack = Stack(model) if self.engine == "shared" else None
        self._target_hidden: dict[int, torch.Tensor] | None = None
        self._unedited: _Pass | None = None
        self._whole: _Pass | None = None  # the unedited pass by whole forwards, where an arm needs it

    @property
    def n_batches(self) -> int:
        """Batches of one pass (each prompt batch of the shared engine, or each batch of whole sequences)."""
        return len(self._prompt_batches) if self.engine == "shared" else len(self._batches)

    def arm(self, edits: Sequence[Edit] = ()) -> ArmOutcomes:
        """The outcomes with ``edits`` applied to the model (all of them at once, as one arm)."""
        return self.arms([edits])[0]

    def arms(self, arms: Sequence[Sequence[Edit]], progress: Progress | None = None) -> list[ArmOutcomes]:
        """The outcomes of each arm (a sequence of edits applied together; empty: the unedited model)."""
        from access.edits import site_edits

        plans = [site_edits(self.model, edits) if edits else None for edits in arms]
        if self.engine == "shared":
            whole = {k for k, plan in enumerate(plans) if plan is not None and _context(plan) == "other"}
            passes = self._shared_passes([None if k in whole else plan for k, plan in enumerate(plans)], progress)
            for k in whole:
                passes[k] = self._full_arm(plans[k])
        else:
            whole, passes = set(), [self._full_arm(plan) for plan in plans]
        unedited = self.unedited()
        return [
            self._outcomes(
                edited, self._whole_unedited() if k in whole else unedited, {} if plan is None else plan.stats.as_dict()
            )
            for k, (edited, plan) in enumerate(zip(passes, plans, strict=True))
        ]

    def unedited(self) -> _Pass:
        """The unedited pass (and the target's hidden states), computed on first use."""
        if self._unedited is None:
            if self.engine == "shared":
                self._shared_passes([], None)
            else:
                self._target_hidden = self._target_pass()
                self._unedited = self._pass()
        assert self._unedited is not None
        return self._unedited

    def _full_arm(self, plan: SiteEdits | None) -> _Pass:
        from access.drivers.torch_hooks import applied

        unedited = self.unedited()
        if plan is None:
            return unedited.copy()
        with applied(self.model, plan):
            return self._pass()

    def _whole_unedited(self) -> _Pass:
        """The unedited pass by whole forwards: the reference of an arm the shared engine leaves to them, so that the
        arm and its reference have the same arithmetic (an arm that changes nothing then closes exactly 0)."""
        if self.engine == "full":
            return self.unedited()
        if self._whole is None:
            self.unedited()  # the target's hidden states
            self._whole = self._pass()
        return self._whole

    def _outcomes(self, edited: _Pass, unedited: _Pass, stats: dict[str, int]) -> ArmOutcomes:
        def mean_logprob(seqs: list[Forced], run: _Pass) -> np.ndarray:
            return np.array([run.logprob_sum[self._index[s]] / s.n_response for s in seqs], dtype=np.float64)

        def margins(run: _Pass) -> np.ndarray:
            return np.array(
                [run.logprob_sum[self._index[c]] - run.logprob_sum[self._index[r]] for c, r in self.pairs],
                dtype=np.float64,
            )

        rows = [self._index[s] for s in self.rows]
        return ArmOutcomes(
            responses=self.responses,
            kl=edited.kl_mean[rows].astype(np.float64),
            kl_unedited=unedited.kl_mean[rows].astype(np.float64),
            reference_logprob=mean_logprob(self.reference, edited),
            reference_unedited=mean_logprob(self.reference, unedited),
            margin=margins(edited),
            margin_unedited=margins(unedited),
            stats=stats,
        )

    # --- the shared engine (access.forced_passes) ---------------------------------------------------------------

    @torch.no_grad()
    def _shared_passes(self, plans: Sequence[SiteEdits | None], progress: Progress | None) -> list[_Pass]:
        """Each plan's pass, batch by batch: the unedited pass (the first time) keeps the hidden states entering every
        fork layer, each patch source and each logit-difference source runs once, then each arm runs from its fork
        layer up (a weight blend entered around its blocks and its head), or, for a logit-difference arm, scores the
        unedited hidden states' logits amplified against its source's. A weight blend from block 0 (``expo``) runs
        after the batches, entered once rather than per batch. Plans with another context: not here (:meth:`arms` runs
        them by whole forwards)."""
        from access.amplify import AmplifiedLogits as Lda
        from access.forced_passes import SourceValues, Stack, fork_layer
        from access.lockstep import Lockstep

        stack = self._stack
        assert stack is not None
        total, n = stack.total, len(self._unique)
        lda = {k: plan.around for k, plan in enumerate(plans) if plan is not None and isinstance(plan.around, Lda)}
        forks = [total if plan is None else fork_layer(plan, stack) for plan in plans]
        keep = sorted({fork for fork in forks if fork < total})
        copied = {k for k, plan in enumerate(plans) if plan is None or (forks[k] == total and k not in lda)}
        # a blend from block 0 (expo: every weight) is entered once for all batches, after them: it copies the model
        whole = [k for k, plan in enumerate(plans) if plan is not None and _context(plan) == "blend" and forks[k] == 0]
        steps = len(self._prompt_batches) * (1 + len(whole))
        on_base = any(forks[k] == total for k in lda)  # a logit-difference arm with no site: the unedited stack's
        sources: dict[int, SourceValues] = {}
        for plan in plans:
            if plan is not None and isinstance(plan.around, Lockstep):
                values = sources.setdefault(id(plan.around.source), SourceValues(Stack(plan.around.source), set()))
                values.sites |= set(plan.around.sites)
        lda_sources = {id(a.lockstep.source): Stack(a.lockstep.source) for a in lda.values()}
        first = self._unedited is None
        unedited = _Pass.empty(n) if first else None
        if first:
            self._target_hidden = {}
        results = [_Pass.empty(n) for _ in plans]
        for b, batch in enumerate(self._prompt_batches):
            if first:
                self._target_batch(batch)
            log_t = self._target_logprobs(batch)
            embedded = stack.embed(batch)
            kept: dict[int, Hidden] = {}
            base: Hidden | None = None
            if unedited is not None or on_base:
                base, kept = stack.run(batch, embedded, range(total), keep)
                if unedited is not None:
                    self._score(batch, self._logits(stack, batch, base), log_t, unedited)
            elif keep:
                _, kept = stack.run(batch, embedded, range(max(keep)), keep)
            for values in sources.values():
                values.compute(batch)
            amplify = {key: (source, _response_hidden(source, batch)) for key, source in lda_sources.items()}
            for k, plan in enumerate(plans):
                if k in copied or k in whole or plan is None:
                    continue
                start = base if forks[k] == total else kept[forks[k]]
                assert start is not None
                self._run_arm(batch, plan, forks[k], start, sources, amplify, log_t, results[k])
            if progress is not None:
                progress(b + 1, steps)
        if unedited is not None:
            self._unedited = unedited
        assert self._unedited is not None
        for n, k in enumerate(whole):
            self._blended_arm(plans[k], results[k], progress, len(self._prompt_batches) * (1 + n), steps)
        for k in copied:
            results[k] = self._unedited.copy()
        return results

    def _run_arm(
        self,
        batch: PromptBatch,
        plan: SiteEdits,
        fork: int,
        start: Hidden,
        sources: dict[int, SourceValues],
        amplify: dict[int, tuple[Stack, list[torch.Tensor]]],
        log_t: dict[int, torch.Tensor],
        into: _Pass,
    ) -> None:
        """One arm on ``batch``, scored into ``into``: its blocks from ``fork`` up (on ``start``, what enters block
        ``fork``; at the top, the stack's output) with its sites hooked, a patch's lockstep fed from its source's
        values, a weight blend above block 0 entered around the blocks and the head (one from block 0:
        :meth:`_blended_arm`), a logit-difference arm's logits amplified against its source's (``amplify``: each
        source's stack and response hidden states on the batch), by the formula its decoding applies."""
        from access.amplify import AmplifiedLogits, WeightBlend, amplified
        from access.lockstep import Lockstep

        stack = self._stack
        assert stack is not None
        lockstep = plan.around if isinstance(plan.around, Lockstep) else None
        phase = None if lockstep is None else _filler(sources[id(lockstep.source)], lockstep)
        blend = plan.around if isinstance(plan.around, WeightBlend) else None
        with blend or nullcontext(), _sites(self.model, plan):
            out = start if fork == stack.total else stack.run(batch, start, range(fork, stack.total), phase=phase)[0]
            logits = self._logits(stack, batch, out)
            if isinstance(plan.around, AmplifiedLogits):
                alpha = plan.around.alpha
                source, hidden = amplify[id(plan.around.lockstep.source)]
                logits = (amplified(mine, source.head(h), alpha) for mine, h in zip(logits, hidden, strict=True))
            self._score(batch, logits, log_t, into)

    def _blended_arm(
        self, plan: SiteEdits | None, into: _Pass, progress: Progress | None, done: int, steps: int
    ) -> None:
        """A weight blend from block 0, entered once: every batch from its embeddings up (the same blocks on the same
        batches as the unedited pass, so a blend that changes nothing reproduces it bit for bit)."""
        stack = self._stack
        assert stack is not None and plan is not None and plan.around is not None
        with plan.around, _sites(self.model, plan):
            for b, batch in enumerate(self._prompt_batches):
                out, _ = stack.run(batch, stack.embed(batch), range(stack.total))
                self._score(batch, self._logits(stack, batch, out), self._target_logprobs(batch), into)
                if progress is not None:
                    progress(done + b + 1, steps)

    @staticmethod
    def _logits(stack: Stack, batch: PromptBatch, out: Hidden) -> Iterator[torch.Tensor]:
        """Per response row, the LM head's logits at the positions that predict its tokens (one row at a time)."""
        return (stack.head(hidden) for hidden in stack.response_hidden(batch, out))

    def _target_batch(self, batch: PromptBatch) -> None:
        """The target's head input at the KL sequences' response positions (kept, ``d_model`` floats a token)."""
        from access.forced_passes import Stack

        assert self._target_hidden is not None
        if not any(i in self._kl_rows for i in batch.seqs):
            return
        stack = Stack(self.target)
        out, _ = stack.run(batch, stack.embed(batch), range(stack.total))
        for i, hidden in zip(batch.seqs, stack.response_hidden(batch, out), strict=True):
            if i in self._kl_rows:
                self._target_hidden[i] = hidden.float().cpu()

    def _target_logprobs(self, batch: PromptBatch) -> dict[int, torch.Tensor]:
        """The target's float64 log-probs at the batch's KL sequences' response positions."""
        assert self._target_hidden is not None
        head = self.target.get_output_embeddings()
        return {
            i: torch.log_softmax(
                head(self._target_hidden[i].to(device=head.weight.device, dtype=head.weight.dtype)).double(), dim=-1
            )
            for i in batch.seqs
            if i in self._kl_rows
        }

    def _score(
        self, batch: PromptBatch, logits: Iterator[torch.Tensor], log_t: dict[int, torch.Tensor], into: _Pass
    ) -> None:
        for i, row_logits in zip(batch.seqs, logits, strict=True):
            log_p = torch.log_softmax(row_logits.double(), dim=-1)
            into.logprob_sum[i], kl = _scores(log_p, self._unique[i], log_t.get(i))
            if kl is not None:
                into.kl_mean[i] = kl

    # --- the full engine: whole forwards, a patch's source in lockstep ------------------------------------------

    @torch.no_grad()
    def _target_pass(self) -> dict[int, torch.Tensor]:
        """The target's final hidden states (the LM head's input) at the positions that predict each KL row's
        response tokens, float32 on the CPU: ``[n_response, d_model]`` per sequence."""
        head = self.target.get_output_embeddings()
        kept: list[torch.Tensor] = []
        handle = head.register_forward_pre_hook(lambda _m, args: kept.append(args[0].detach()))
        out: dict[int, torch.Tensor] = {}
        try:
            for batch in self._batches:
                kl_batch = [i for i in batch if i in self._kl_rows]
                if not kl_batch:
                    continue
                kept.clear()
                forced_logits(self.target, [self._unique[i] for i in batch])
                hidden = kept[0]
                keep = hidden.shape[1] - 1
                for row, i in enumerate(batch):
                    if i in self._kl_rows:
                        n = self._unique[i].n_response
                        out[i] = hidden[row, keep - n : keep].float().cpu()
        finally:
            handle.remove()
        return out

    @torch.no_grad()
    def _pass(self) -> _Pass:
        result = _Pass.empty(len(self._unique))
        head = self.target.get_output_embeddings()
        for batch in self._batches:
            seqs = [self._unique[i] for i in batch]
            logits = forced_logits(self.model, seqs)
            keep = logits.shape[1] - 1
            for row, (i, seq) in enumerate(zip(batch, seqs, strict=True)):
                n = seq.n_response
                log_p = torch.log_softmax(logits[row, keep - n : keep].double(), dim=-1)
                log_t = None
                if i in self._kl_rows:
                    assert self._target_hidden is not None
                    hidden = self._target_hidden[i].to(device=head.weight.device, dtype=head.weight.dtype)
                    log_t = torch.log_softmax(head(hidden).double(), dim=-1).to(log_p.device)
                result.logprob_sum[i], kl = _scores(log_p, seq, log_t)
                if kl is not None:
                    result.kl_mean[i] = kl
        return result


def _scores(log_p: torch.Tensor, seq: Forced, log_t: torch.Tensor | None) -> tuple[float, float | None]:
    """The summed log-prob of ``seq``'s response under ``log_p`` ``[n, vocab]``, and the mean KL(target || model)
    over its tokens where the target's ``log_t`` is given."""
    targets = torch.tensor(seq.ids[-seq.n_response :], device=log_p.device)
    logprob = float(log_p.gather(-1, targets[:, None]).sum())
    if log_t is None:
        return logprob, None
    kl = torch.nn.functional.kl_div(log_p, log_t.to(log_p.device), log_target=True, reduction="none").sum(-1)
    return logprob, float(kl.mean())


def _response_hidden(stack: Stack, batch: PromptBatch) -> list[torch.Tensor]:
    """A whole stack's LM-head inputs at each response row's positions (a logit-difference source, once per batch for
    all its arms)."""
    out, _ = stack.run(batch, stack.embed(batch), range(stack.total))
    return stack.response_hidden(batch, out)


def _context(plan: SiteEdits) -> str:
    """What a plan enters around its forwards: ``none``, ``lockstep`` (a patch's source), ``blend`` (a weight blend),
    ``lda`` (logit-difference amplification) or ``other`` (which the shared engine leaves to whole forwards)."""
    from access.amplify import AmplifiedLogits, WeightBlend
    from access.lockstep import Lockstep

    if plan.around is None:
        return "none"
    kinds = {Lockstep: "lockstep", WeightBlend: "blend", AmplifiedLogits: "lda"}
    return next((name for kind, name in kinds.items() if isinstance(plan.around, kind)), "other")


@contextmanager
def _sites(model: PreTrainedModel, plan: SiteEdits) -> Iterator[None]:
    """The plan's site functions hooked into ``model`` (not its context: the shared engine feeds a lockstep)."""
    from access.hook_points import attach

    handles = [attach(model, hook, layer, fn) for hook, layer, fn in plan.sites]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _filler(source: SourceValues, lockstep: Lockstep) -> Callable[[str], None]:
    return lambda phase: source.fill(lockstep, phase)


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
    if max_batch_tokens < 1 or batch_size < 1:
        raise ProbeError(f"outcomes: batch limits must be positive, got {max_batch_tokens} tokens, {batch_size} rows")
    order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i].ids), i))
    batches: list[list[int]] = []
    for i in order:
        last = batches[-1] if batches else None
        if last is not None and len(last) < batch_size and (len(last) + 1) * len(seqs[i].ids) <= max_batch_tokens:
            last.append(i)
        else:
            batches.append([i])
    return batches
