"""The shared teacher-forced engine: every arm of an outcome run over prompt batches that compute once what arms share.

:class:`SharedForcing` is :class:`access.outcomes.Outcomes`' ``shared`` engine (:data:`access.stack.ENGINES`). Per
batch of prompts (:func:`access.forced_passes.prompt_batches`), the unedited pass (the first time) keeps the hidden
states entering every fork layer, each patch source and each logit-difference source runs once, then each arm runs
from its fork layer up on :class:`access.forced_passes.ForcedStack`:

* a patch's lockstep is fed from its source's values (:class:`access.forced_passes.SourceValues`); a source that is
  the target model (a patch from the other checkpoint, measured against it) runs whole in the first call and gives
  the target's head input from the same pass, and the values at the sites :meth:`SharedForcing.keep_sources` names
  are kept for later calls, which then do not run the source again;
* a weight blend (:class:`access.amplify.WeightBlend`) is entered around its blocks and the head, from the lowest
  block it blends; one from block 0 (``expo``) runs after the batches, entered once rather than per batch;
* a logit-difference arm (:class:`access.amplify.AmplifiedLogits`) scores its logits amplified against its source's
  by :func:`access.amplify.amplified`, the formula its decoding applies.

An arm with another context around its forwards is not run here (:func:`context_of` says ``other``): ``Outcomes``
runs it by whole forwards. Every arm has the arithmetic of the unedited pass, so one that changes no value
reproduces it bit for bit.

Example:
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> from access.forced import Forced, Sequences
    >>> from access.forced_passes import prompt_batches
    >>> config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
    ...                      num_attention_heads=2, num_key_value_heads=1)
    >>> _ = torch.manual_seed(0); sft, dpo = LlamaForCausalLM(config), LlamaForCausalLM(config)
    >>> unique = [Forced((1, 5, 7, 9), 2), Forced((1, 5, 8), 1)]
    >>> batches = prompt_batches([s.parts for s in unique], 64, 8)
    >>> engine = SharedForcing(dpo, Sequences(unique, {0, 1}, sft), batches)
    >>> [bool(kl > 0) for kl in engine.passes([None])[0].kl_mean]   # the unedited pass against the other model
    [True, True]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from access.forced import Forced, ForcedPass, Sequences, scores
from access.forced_passes import ForcedStack, Hidden, PromptBatch, SourceValues, fork_layer, judged_batch
from access.hook_points import attach
from access.lockstep import Lockstep

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from access.drivers.base import SiteEdits

# The response positions one LM-head product takes: on the default pair's outcome passes (2026-11-30, 2 CPU threads) a
# product per response row (about 32 positions) ran at 55 GFLOP/s, and 256 positions run near the rate of 1,024 (the
# logits of 256 positions of a 128k vocabulary are 128 MiB in float32)
HEAD_POSITIONS = 256
Progress = Callable[[int, int], None]  # (batches done, batches in all) of one call of Outcomes.arms
Amplify = dict[int, tuple[ForcedStack, list[torch.Tensor]]]  # per lda source: its stack, its response hidden states


@dataclass
class _Arms:
    """How each plan of one call runs on the shared engine."""

    forks: list[int]  # per plan, the block it runs from (the stack's total: it runs none)
    keep: list[int]  # the fork layers whose input the unedited pass keeps
    copied: set[int]  # plans that change nothing here: the unedited pass itself
    whole: list[int]  # weight blends from block 0, each run after the batches, entered once
    on_base: bool  # a logit-difference arm with no site reads the unedited stack's output
    sources: dict[int, SourceValues]  # per patch source (by id), its values on the batch
    lda_sources: dict[int, ForcedStack]  # per logit-difference source (by id), its stack


class SharedForcing:
    """The shared engine over ``batches`` of ``seqs`` for edits of ``model`` (module doc)."""

    def __init__(
        self, model: PreTrainedModel, seqs: Sequences, batches: list[PromptBatch], judged: Sequence[Forced] = ()
    ) -> None:
        self.model, self.seqs, self.batches = model, seqs, batches
        self.judged = list(judged)
        unique, judging = [s.parts for s in seqs.unique], [s.parts for s in self.judged]
        self._judged_batches = [judged_batch(batch, unique, judging) if judging else None for batch in batches]
        self.judged_logprob: dict[int, float] = {}  # per judged sequence the target's pass ran, its response's log-prob
        self.stack = ForcedStack(model)
        self.kept_sites: set[tuple[str, int]] = set()  # patch sources' sites whose values later calls reuse
        self._kept: dict[tuple[int, int], dict[str, dict[tuple[str, int], torch.Tensor]]] = {}  # (source, batch)
        self.unedited: ForcedPass | None = None  # computed by the first call of :meth:`passes`, with the target's

    def keep_sources(self, sites: set[tuple[str, int]]) -> None:
        """Keep each patch source's values at ``sites`` (``(hook, layer)``) on every batch from the next call on, so
        that later calls patching only kept sites read them instead of running the source again (memory: a
        hook-point tensor per site and batch)."""
        self.kept_sites = set(sites)

    @torch.no_grad()
    def passes(self, plans: Sequence[SiteEdits | None], progress: Progress | None = None) -> list[ForcedPass]:
        """Each plan's pass, batch by batch (``None``: the unedited pass, copied); the first call also computes the
        target's hidden states and :attr:`unedited`. Plans with another context: not here (module doc)."""
        arms = self._arms(plans)
        steps = len(self.batches) * (1 + len(arms.whole))
        unedited = ForcedPass.empty(len(self.seqs.unique)) if self.unedited is None else None
        if unedited is not None:
            self.seqs.target_hidden = {}
        results = [ForcedPass.empty(len(self.seqs.unique)) for _ in plans]
        for b in range(len(self.batches)):
            self._batch(b, plans, arms, unedited, results)
            if progress is not None:
                progress(b + 1, steps)
        if unedited is not None:
            self.unedited = unedited
        assert self.unedited is not None
        for n, k in enumerate(arms.whole):
            self._blended_arm(plans[k], results[k], progress, len(self.batches) * (1 + n), steps)
        for k in arms.copied:
            results[k] = self.unedited.copy()
        return results

    def _arms(self, plans: Sequence[SiteEdits | None]) -> _Arms:
        from access.amplify import AmplifiedLogits

        total = self.stack.total
        lda = {
            k: plan.around
            for k, plan in enumerate(plans)
            if plan is not None and isinstance(plan.around, AmplifiedLogits)
        }
        forks = [total if plan is None else fork_layer(plan, self.stack) for plan in plans]
        sources: dict[int, SourceValues] = {}
        for plan in plans:
            if plan is not None and isinstance(plan.around, Lockstep):
                values = sources.setdefault(
                    id(plan.around.source), SourceValues(ForcedStack(plan.around.source), set())
                )
                values.sites |= set(plan.around.sites)
        return _Arms(
            forks=forks,
            keep=sorted({fork for fork in forks if fork < total}),
            copied={k for k, plan in enumerate(plans) if plan is None or (forks[k] == total and k not in lda)},
            whole=[
                k for k, plan in enumerate(plans) if plan is not None and context_of(plan) == "blend" and forks[k] == 0
            ],
            on_base=any(forks[k] == total for k in lda),
            sources=sources,
            lda_sources={id(a.lockstep.source): ForcedStack(a.lockstep.source) for a in lda.values()},
        )

    def _batch(
        self,
        b: int,
        plans: Sequence[SiteEdits | None],
        arms: _Arms,
        unedited: ForcedPass | None,
        results: list[ForcedPass],
    ) -> None:
        """Batch ``b`` of every plan (and of the target and the unedited pass, where ``unedited`` is to be filled)."""
        stack, total, batch = self.stack, self.stack.total, self.batches[b]
        self._sources(b, arms.sources, target=unedited is not None)
        log_t = self._target_logprobs(batch)
        embedded = stack.embed_batch(batch)
        kept: dict[int, Hidden] = {}
        base: Hidden | None = None
        if unedited is not None or arms.on_base:
            base, kept = stack.run(batch, embedded, range(total), arms.keep)
            if unedited is not None:
                self._score(batch, self._logits(batch, base), log_t, unedited)
        elif arms.keep:
            _, kept = stack.run(batch, embedded, range(max(arms.keep)), arms.keep)
        amplify = {key: (source, _response_hidden(source, batch)) for key, source in arms.lda_sources.items()}
        for k, plan in enumerate(plans):
            if k in arms.copied or k in arms.whole or plan is None:
                continue
            start = base if arms.forks[k] == total else kept[arms.forks[k]]
            assert start is not None
            self._run_arm(batch, plan, arms.forks[k], start, arms.sources, amplify, log_t, results[k])

    def _run_arm(
        self,
        batch: PromptBatch,
        plan: SiteEdits,
        fork: int,
        start: Hidden,
        sources: dict[int, SourceValues],
        amplify: Amplify,
        log_t: dict[int, torch.Tensor],
        into: ForcedPass,
    ) -> None:
        """One arm on ``batch``, scored into ``into``: its blocks from ``fork`` up (on ``start``, what enters block
        ``fork``; at the top, the stack's output) with its sites hooked, a patch's lockstep fed from its source's
        values, a weight blend above block 0 entered around the blocks and the head (one from block 0:
        :meth:`_blended_arm`), a logit-difference arm's logits amplified against its source's (``amplify``: each
        source's stack and response hidden states on the batch), by the formula its decoding applies."""
        from access.amplify import AmplifiedLogits, WeightBlend, amplified

        stack = self.stack
        lockstep = plan.around if isinstance(plan.around, Lockstep) else None
        phase = None if lockstep is None else _filler(sources[id(lockstep.source)], lockstep)
        blend = plan.around if isinstance(plan.around, WeightBlend) else None
        with blend or nullcontext(), _sites(self.model, plan):
            out = start if fork == stack.total else stack.run(batch, start, range(fork, stack.total), phase=phase)[0]
            logits = self._logits(batch, out)
            if isinstance(plan.around, AmplifiedLogits):
                alpha = plan.around.alpha
                source, hidden = amplify[id(plan.around.lockstep.source)]
                logits = (amplified(mine, source.head(h), alpha) for mine, h in zip(logits, hidden, strict=True))
            self._score(batch, logits, log_t, into)

    def _blended_arm(
        self, plan: SiteEdits | None, into: ForcedPass, progress: Progress | None, done: int, steps: int
    ) -> None:
        """A weight blend from block 0, entered once: every batch from its embeddings up (the same blocks on the same
        batches as the unedited pass, so a blend that changes nothing reproduces it bit for bit)."""
        stack = self.stack
        assert plan is not None and plan.around is not None
        with plan.around, _sites(self.model, plan):
            for b, batch in enumerate(self.batches):
                out, _ = stack.run(batch, stack.embed_batch(batch), range(stack.total))
                self._score(batch, self._logits(batch, out), self._target_logprobs(batch), into)
                if progress is not None:
                    progress(done + b + 1, steps)

    def _logits(self, batch: PromptBatch, out: Hidden) -> Iterator[torch.Tensor]:
        """Per response row, the LM head's logits at the positions that predict its tokens: the rows' positions in
        products of up to :data:`HEAD_POSITIONS` (a product per row ran at a third of the rate on a CPU)."""
        return _head_logits(self.stack, self.stack.response_hidden(batch, out))

    def _sources(self, b: int, sources: dict[int, SourceValues], *, target: bool) -> None:
        """Each patch source's values on batch ``b``: the kept ones where they hold every site it needs, else from a
        pass of the source (whole, where it is the target model and ``target`` asks for the target's head input:
        one pass for both); then the target's own pass where no source gave it."""
        batch, judged = self.batches[b], self._judged_batches[b]
        target = target and any(i in self.seqs.kl_rows for i in batch.seqs)
        for values in sources.values():
            key = (id(values.stack.model), b)
            kept = self._kept.get(key)
            if kept is not None and values.sites <= kept["prompt"].keys():
                values.values = kept
                continue
            whole = target and values.stack.model is self.seqs.target
            out = values.compute(batch, whole=whole, judged=judged)
            if whole:
                self._target_batch(batch, values.stack, out, judged)
                target = False
            if self.kept_sites & values.sites:
                self._kept[key] = {
                    phase: {site: v for site, v in per_site.items() if site in self.kept_sites}
                    for phase, per_site in values.values.items()
                }
        if target:
            stack = ForcedStack(self.seqs.target)
            out = stack.run(batch, stack.embed_batch(batch), range(stack.total), judged=judged)[0]
            self._target_batch(batch, stack, out, judged)

    def _target_batch(self, batch: PromptBatch, stack: ForcedStack, out: Hidden, judged: PromptBatch | None) -> None:
        """The target's head input at the KL sequences' response positions (kept, ``d_model`` floats a token), from
        the target's whole pass ``out``; and the NLL of each ``judged`` response it ran."""
        assert self.seqs.target_hidden is not None
        for i, hidden in zip(batch.seqs, stack.response_hidden(batch, out), strict=True):
            if i in self.seqs.kl_rows:
                self.seqs.target_hidden[i] = hidden.float().cpu()
        if judged is not None and out.judged is not None:
            rows = stack.response_hidden(judged, Hidden(out.prompt, out.judged))
            for j, row_logits in zip(judged.seqs, _head_logits(stack, rows), strict=True):
                log_p = torch.log_softmax(row_logits.double(), dim=-1)
                self.judged_logprob[j] = scores(log_p, self.judged[j], None)[0]

    def _target_logprobs(self, batch: PromptBatch) -> dict[int, torch.Tensor]:
        """The target's float64 log-probs at the batch's KL sequences' response positions."""
        return {i: self.seqs.target_logprobs(i) for i in batch.seqs if i in self.seqs.kl_rows}

    def _score(
        self, batch: PromptBatch, logits: Iterator[torch.Tensor], log_t: dict[int, torch.Tensor], into: ForcedPass
    ) -> None:
        for i, row_logits in zip(batch.seqs, logits, strict=True):
            into.score(i, torch.log_softmax(row_logits.double(), dim=-1), self.seqs.unique[i], log_t.get(i))


def _head_logits(stack: ForcedStack, rows: list[torch.Tensor]) -> Iterator[torch.Tensor]:
    """``stack``'s LM-head logits of each of ``rows`` (head inputs), in products of up to :data:`HEAD_POSITIONS`."""
    for run in _chunks(rows, HEAD_POSITIONS):
        yield from stack.head(torch.cat(run)).split([len(row) for row in run])


def _chunks(rows: list[torch.Tensor], positions: int) -> Iterator[list[torch.Tensor]]:
    """``rows`` in runs of consecutive rows of at most ``positions`` positions in all (a longer row alone)."""
    run: list[torch.Tensor] = []
    taken = 0
    for row in rows:
        if run and taken + len(row) > positions:
            yield run
            run, taken = [], 0
        run.append(row)
        taken += len(row)
    if run:
        yield run


def context_of(plan: SiteEdits) -> str:
    """What a plan enters around its forwards: ``none``, ``lockstep`` (a patch's source), ``blend`` (a weight blend),
    ``lda`` (logit-difference amplification) or ``other`` (which the shared engine leaves to whole forwards)."""
    from access.amplify import AmplifiedLogits, WeightBlend

    if plan.around is None:
        return "none"
    kinds = {Lockstep: "lockstep", WeightBlend: "blend", AmplifiedLogits: "lda"}
    return next((name for kind, name in kinds.items() if isinstance(plan.around, kind)), "other")


def _response_hidden(stack: ForcedStack, batch: PromptBatch) -> list[torch.Tensor]:
    """A whole stack's LM-head inputs at each response row's positions (a logit-difference source, once per batch for
    all its arms)."""
    out, _ = stack.run(batch, stack.embed_batch(batch), range(stack.total))
    return stack.response_hidden(batch, out)


@contextmanager
def _sites(model: PreTrainedModel, plan: SiteEdits) -> Iterator[None]:
    """The plan's site functions hooked into ``model`` (not its context: the shared engine feeds a lockstep)."""
    handles = [attach(model, hook, layer, fn) for hook, layer, fn in plan.sites]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _filler(source: SourceValues, lockstep: Lockstep) -> Callable[[str], None]:
    return lambda phase: source.fill(lockstep, phase)
