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

Two engines run the passes (:data:`access.stack.ENGINES`): ``shared``
(:class:`access.forced_shared.SharedForcing`, on :class:`access.stack.Stack`) and ``per-arm``
(:class:`access.forced.WholeForwards`); the sequences, their batches and scores are
:mod:`access.forced`'s.

Example:
    >>> import torch
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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from access.forced import Forced, ForcedPass, Sequences, WholeForwards, forced, forced_logits, pack, scores
from access.forced_shared import Progress, SharedForcing, context_of
from access.stack import ENGINES, PER_ARM, SHARED, unsupported
from core.clock import FORCED, timed
from core.errors import ProbeError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from access.drivers.base import SiteEdits
    from access.edits import Edit

# Forced, forced, forced_logits and pack moved to access.forced, ENGINES to access.stack; importable here as before
__all__ = [
    "ENGINES",
    "RESPONSE_SOURCES",
    "ArmOutcomes",
    "Forced",
    "Outcomes",
    "Progress",
    "forced",
    "forced_logits",
    "gap_closed",
    "pack",
    "row_gap_closed",
]

RESPONSE_SOURCES: tuple[str, ...] = ("greedy", "reference", "chosen", "rejected", "file")


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


class Outcomes:
    """The outcomes of edits to ``model`` against ``target`` (the other checkpoint) on fixed sequences.

    ``rows``: the KL sequences (one per test row); ``reference``: sequences whose response is each row's reference
    (for ``reference_logprob``; may be ``rows`` itself); ``pairs``: (chosen, rejected) sequences of DPO pairs.
    ``responses`` names what the KL rows' responses are, for reports. ``judged``: more sequences whose response the
    target's pass scores under the target alone, over the prompts it runs anyway (:meth:`target_nll`: the coherence
    guard's rows; the shared engine only). Call :meth:`arms` with every arm at once (each
    batch of sequences is then prepared once for all of them), or :meth:`arm` once per arm.

    ``engine`` (one of :data:`access.stack.ENGINES`, or ``auto``): ``shared`` runs
    :class:`access.forced_shared.SharedForcing` (each prompt once per batch for all its responses, each arm from its
    fork layer, patch sources once per batch); ``per-arm`` runs :class:`access.forced.WholeForwards`, one whole
    ``transformers`` forward per batch per arm, a patch's source in lockstep (the engine before; the reference the
    tests hold ``shared`` to); ``auto`` (the default): ``shared`` where the stack runs both models
    (:func:`access.stack.unsupported`), else ``per-arm``. Under ``shared``, a weight blend (``expo``, ``expo-units``)
    runs from the lowest block it blends, a logit-difference arm (``lda``) scores the unedited model's logits
    amplified against its source's, and an arm whose edits bring any other context (several together, say) runs on
    ``per-arm`` and is measured against the unedited pass by ``per-arm`` too: every arm is a difference of two passes
    with the same arithmetic, so one that changes nothing closes exactly 0.
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
        judged: Sequence[Forced] = (),
    ) -> None:
        from access.forced_passes import prompt_batches

        self.engine = _engine(model, target, engine)
        self.model, self.target, self.responses = model, target, responses
        self.rows, self.reference, self.pairs = list(rows), list(reference), list(pairs)
        kl_rows = set(self.rows)
        unique: dict[Forced, int] = {}
        for seq in [*self.rows, *self.reference, *(s for pair in self.pairs for s in pair)]:
            unique.setdefault(seq, len(unique))
        self._index = unique
        self._seqs = Sequences(list(unique), {unique[seq] for seq in self.rows}, target)
        self._whole = WholeForwards(model, self._seqs, pack(self._seqs.unique, max_batch_tokens, batch_size))
        self._shared = (
            SharedForcing(
                model,
                self._seqs,
                prompt_batches(
                    [s.parts for s in self._seqs.unique],
                    max_batch_tokens,
                    batch_size,
                ),
                judged=[seq for seq in dict.fromkeys(judged) if seq not in kl_rows],
            )
            if self.engine == SHARED
            else None
        )
        self._whole_unedited_pass: ForcedPass | None = None  # the unedited pass by whole forwards, once needed
        self._target_nll: dict[tuple[tuple[int, ...], tuple[int, ...]], float] | None = None  # once asked for

    @property
    def n_batches(self) -> int:
        """Batches of one pass (each prompt batch of the shared engine, or each batch of whole sequences)."""
        return len(self._shared.batches) if self._shared is not None else len(self._whole.batches)

    @property
    def padded_tokens(self) -> int:
        """Padded tokens of one pass of the shared engine (prompts once, responses), 0 under the per-arm engine."""
        return sum(b.n_tokens() for b in self._shared.batches) if self._shared is not None else 0

    def arm(self, edits: Sequence[Edit] = ()) -> ArmOutcomes:
        """The outcomes with ``edits`` applied to the model (all of them at once, as one arm)."""
        return self.arms([edits])[0]

    @timed(FORCED)
    def arms(self, arms: Sequence[Sequence[Edit]], progress: Progress | None = None) -> list[ArmOutcomes]:
        """The outcomes of each arm (a sequence of edits applied together; empty: the unedited model)."""
        from access.edits import site_edits

        plans = [site_edits(self.model, edits) if edits else None for edits in arms]
        if self._shared is not None:
            whole = {k for k, plan in enumerate(plans) if plan is not None and context_of(plan) == "other"}
            passes = self._shared.passes([None if k in whole else plan for k, plan in enumerate(plans)], progress)
            for k in whole:
                passes[k] = self._per_arm(plans[k])
        else:
            whole, passes = set(), [self._per_arm(plan) for plan in plans]
        unedited = self.unedited()
        return [
            self._outcomes(
                edited, self._whole_unedited() if k in whole else unedited, {} if plan is None else plan.stats.as_dict()
            )
            for k, (edited, plan) in enumerate(zip(passes, plans, strict=True))
        ]

    def keep_source_values(self, sites: set[tuple[str, int]]) -> None:
        """Keep the patch sources' values at ``sites`` (``(hook, layer)``) across calls of :meth:`arms`, so that a
        later call patching only those sites does not run its source again (the shared engine; the per-arm engine
        runs its sources in lockstep whatever). Memory: one hook-point tensor per site over every sequence."""
        if self._shared is not None:
            self._shared.keep_sources(sites)

    @timed(FORCED)
    def unedited(self) -> ForcedPass:
        """The unedited pass (and the target's hidden states), computed on first use."""
        if self._shared is None:
            return self._whole_unedited()
        if self._shared.unedited is None:
            self._shared.passes([])
        assert self._shared.unedited is not None
        return self._shared.unedited

    @torch.no_grad()
    def target_nll(self) -> dict[tuple[tuple[int, ...], tuple[int, ...]], float]:
        """Each KL row's response NLL under the target model (nats, summed over its tokens), keyed by its ``(prompt,
        response)`` token ids: what the target's pass gave the KL already (the coherence guard reads it instead of
        running those rows again), worked out once; with the ``judged`` sequences that pass ran over its prompts (the
        shared engine: those whose prompt some batch runs)."""
        if self._target_nll is None:
            self.unedited()
            logprobs = {seq: scores(self._seqs.target_logprobs(self._index[seq]), seq, None)[0] for seq in self.rows}
            if self._shared is not None:
                judged = self._shared.judged
                logprobs.update((judged[j], value) for j, value in self._shared.judged_logprob.items())
            self._target_nll = {s.parts: -v for s, v in logprobs.items()}
        return self._target_nll

    def _per_arm(self, plan: SiteEdits | None) -> ForcedPass:
        """One arm by whole forwards, its edits applied around them."""
        from access.drivers.torch_hooks import applied

        unedited = self.unedited()
        if plan is None:
            return unedited.copy()
        with applied(self.model, plan):
            return self._whole.run()

    def _whole_unedited(self) -> ForcedPass:
        """The unedited pass by whole forwards: the per-arm engine's, and under ``shared`` the reference of an arm it
        leaves to whole forwards, so that the arm and its reference have the same arithmetic (an arm that changes
        nothing then closes exactly 0)."""
        if self._whole_unedited_pass is None:
            if self._shared is not None:
                self.unedited()  # the target's hidden states, by the shared engine
            else:
                self._seqs.target_hidden = self._whole.target_hidden()
            self._whole_unedited_pass = self._whole.run()
        return self._whole_unedited_pass

    def _outcomes(self, edited: ForcedPass, unedited: ForcedPass, stats: dict[str, int]) -> ArmOutcomes:
        def mean_logprob(seqs: list[Forced], run: ForcedPass) -> np.ndarray:
            return np.array([run.logprob_sum[self._index[s]] / s.n_response for s in seqs], dtype=np.float64)

        def margins(run: ForcedPass) -> np.ndarray:
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


def _engine(model: PreTrainedModel, target: PreTrainedModel, engine: str) -> str:
    """The engine ``engine`` names for these models (``auto``: ``shared`` where the stack runs both), after the checks
    every engine needs."""
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
    if engine not in ("auto", *ENGINES):
        raise ProbeError(f"outcomes: unknown engine {engine!r}; expected auto or one of {', '.join(ENGINES)}")
    why = unsupported(model) or unsupported(target)
    if engine == SHARED and why is not None:
        raise ProbeError(f"outcomes: the shared engine cannot run these models: {why}")
    return engine if engine != "auto" else SHARED if why is None else PER_ARM
