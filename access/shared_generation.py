"""Many arms per pass: every arm of one model decodes greedily in shared batches, computing once what arms share.

An A/B run generates the same prompts once per arm: the baseline, the main arm, its controls and
doses, and 20 placebo arms. The arms differ only from the lowest block any of them edits (the
*fork layer*; the selected units of a real pair sit in its upper layers), and most placebo rows
decode the baseline's own tokens for most of their steps. :class:`SharedDecoder` decodes all arms
of one model together, batch of prompts by batch of prompts:

* **rows.** Each (arm, prompt) is one row of the upper blocks (fork layer and above), which carry
  each arm's edits on its own rows (:func:`access.shared_sites.arm_sites`); rows are kept arm-major, so an
  arm's rows are one slice and its site functions run on that slice unchanged.
* **groups.** Rows with the same tokens so far form one *group*; the blocks below the fork layer run
  once per group and their keys and values are kept once per group. All arms of a prompt start in
  one group; when their next tokens differ, the group forks and the new groups copy its cache
  (:class:`access.decode_batch.DecodeBatch`).
* **stems.** Prompts that begin alike (the same system turn, the same passage) are batched together
  (:func:`access.stems.stem_batches`); their shared first tokens, the *stem*, run once per arm, and each
  prompt's own remainder runs over the stem's keys and values (:class:`access.kv_cache.Seed`). The A/B
  prompts of the default pair share about a third of their tokens this way.
* **finished rows** (a stop token, or ``max_new_tokens``) leave the batch; their rows and groups are
  dropped from the caches once an eighth of the rows have finished.
* **budget.** Multi-token forwards (the prompt pass) run in slices of rows of at most the token
  budget of :func:`core.budget.default_max_batch_tokens`; their caches are joined afterwards. When
  the rows' caches would pass :func:`core.budget.default_cache_bytes`, the passes decode a batch of
  prompts in groups of arms (:meth:`SharedDecoder.arm_chunks`), each running the shared blocks once.

* **joint steps.** Batches of prompts whose caches, every pass's rows together, fit
  :func:`core.budget.default_cache_bytes` run their prompt passes one by one and then every decode step as one
  forward (:mod:`access.joint_steps`): a step reads the weights once for all their rows, each batch attends over its
  own keys and values, and each pass's site functions run on each batch's rows in turn. Passes that read a patch
  source decode batch by batch.

* **products.** On a CPU in float32, every linear layer of the model and of its patch sources multiplies by its
  weight packed once for oneDNN while the passes decode (:func:`access.packed_linear.prepacked`): a decode step's few
  dozen rows run at 1.4-2x torch's own product's rate.

The blocks run on :class:`access.stack.Stack`; one batch of prompts decodes in
:class:`access.decode_step.BatchDecoder`.

Decoding reproduces ``generate``'s greedy path: left padding, positions
from the attention mask, masks built by the model's own ``create_causal_mask``, float32 argmax of
the last position's logits, responses cut at the first stop token. Each block computes the same
function of the same inputs for every row, so in float32 every arm's tokens equal those of the arm
run alone up to kernel rounding (the batches are the generator's where no prompts share a stem):
CPU matrix products give bit-identical rows only for some row counts, and oneDNN's packed products round otherwise
than torch's, so at a near-tie of two logits a token can differ from ``generate``'s
(``benchmarks/bench_interventions.py`` prints any token that differs on the default pair).

* **patch sources.** A patch (an edit whose context is a source model run in lockstep) joins the
  shared batches too: each source runs once per group, up to its highest patched block, with a cache
  that forks with the group's; before a patch arm's site function runs, its lockstep holds the
  source's values at its units for exactly that arm's rows.

What cannot be shared decodes arm by arm (:func:`unshareable` says why): sampling, the nnsight
backend, other contexts around generation, architectures whose forward this module does not
reproduce (:func:`access.stack.unsupported`), and generation configs with logits processors.

Example:
    >>> system = list(range(100, 120))   # 20 tokens that prompts 0 and 2 begin with
    >>> stem_batches([[*system, 1, 2], [7, 8, 9], [*system, 3]], batch_size=4)
    [[Stem(length=20, members=(0, 2))], [Stem(length=0, members=(1,))]]
    >>> decoder = SharedDecoder(generator)   # doctest: +SKIP
    >>> base, ablated = decoder.run([None, site_edits(model, [Scale(units, 0.0)])])   # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from access.decode_step import BatchDecoder, Decoded
from access.driver_table import DEFAULT_DRIVER, driver
from access.drivers.base import SiteEdits
from access.generation import Generations, Generator
from access.hook_points import attach
from access.kv_cache import growing_layer_class as _growing_layer_class
from access.lockstep import Lockstep
from access.packed_linear import prepacked
from access.shared_sites import Attach, Sources, arm_sites
from access.stack import Stack, run_blocks, unsupported
from access.stems import MIN_STEM, Stem, members, stem_batches, stem_batches_within, stem_tokens
from core.budget import default_cache_bytes, default_max_batch_tokens
from core.clock import GENERATION, timed
from core.flops import shared_passes
from core.models import warn

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# moved to access.stack, access.stems and access.kv_cache; importable here as before
__all__ = [
    "MIN_STEM",
    "Attach",
    "BatchDone",
    "SharedDecoder",
    "Stem",
    "_growing_layer_class",
    "first_edited_layer",
    "generate_unedited",
    "members",
    "pass_unshareable",
    "run_blocks",
    "stem_batches",
    "unshareable",
]

# Generation-config fields that would add a logits processor to greedy decoding, with their neutral values.
_NEUTRAL_GENERATION: dict[str, Any] = {
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_repetition_penalty": 1.0,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "min_new_tokens": None,
    "sequence_bias": None,
    "guidance_scale": None,
    "exponential_decay_length_penalty": None,
}
# one row's decode step through one block, in prompt tokens through one block, with every row decoding to the limit;
# fitted to the default A/B on the default pair (2-core CPU, 2026-11-24: estimated with it 23 min, took 22 min 56 s)
DECODE_COST = 0.75
HEAD_BLOCKS = 8.0  # the LM head of one row, in blocks (SmolLM2: 28M weights against 3.5M per block)

# (batches done, batches in all, its prompts, its seconds, read back)
BatchDone = Callable[[int, int, int, float, bool], None]


def unshareable(
    model: PreTrainedModel, do_sample: bool, backend: str, passes: Sequence[SiteEdits | None] = ()
) -> str | None:
    """Why these passes cannot decode in shared batches on ``model`` (``None``: they can)."""
    if do_sample:
        return "sampling decodes arm by arm (each arm draws its own seeded stream)"
    if not driver(backend).shares_batches:
        return f"the {backend} backend decodes arm by arm"
    why = unsupported(model)
    if why is not None:
        return f"{why}, so it decodes arm by arm"
    generation = model.generation_config
    for name, neutral in _NEUTRAL_GENERATION.items():
        value = getattr(generation, name, None)
        if value not in (None, neutral, [], 0 if neutral is None else neutral):
            return f"the model's generation config sets {name}={value!r}, which decodes arm by arm"
    for p in passes:
        why = pass_unshareable(model, p)
        if why:
            return why
    return None


def pass_unshareable(model: PreTrainedModel, edits: SiteEdits | None) -> str | None:
    """Why one pass cannot join shared batches on ``model`` (``None``: it can; a patch can,
    its source runs once per group)."""
    if edits is None or edits.around is None:
        return None
    if not isinstance(edits.around, Lockstep):
        return "an edit with its own context around generation decodes arm by arm"
    if edits.around.source is model:
        return "a patch whose source is the patched model itself decodes arm by arm"
    return None


def first_edited_layer(edits: SiteEdits | None, total: int) -> int:
    """The lowest block an edit touches (``total`` for an unedited pass)."""
    return min((layer for _, layer, _ in edits.sites), default=total) if edits is not None else total


class SharedDecoder:
    """Greedy decoding of many passes (compiled edits, or ``None`` for unedited)
    over one :class:`Generator`'s prompts."""

    def __init__(
        self,
        generator: Generator,
        max_batch_tokens: int | None = None,
        attach: Attach = attach,
        parts: Sequence[Sequence[int]] | None = None,
    ) -> None:
        """``attach`` places the passes' site functions (the torch driver's hooks); ``parts``: groups of the
        generator's prompts that no batch mixes (:func:`access.stems.stem_batches_within`; default: one group)."""
        self.generator, self.model, self.attach = generator, generator.model, attach
        self.stack = Stack(self.model)
        self.total = self.stack.total
        longest = max(len(p) for p in generator.prompts) + generator.config.max_new_tokens
        dtype_bytes = next(self.model.parameters()).element_size()
        self.max_batch_tokens = max_batch_tokens or default_max_batch_tokens(
            str(generator.device), self.model.config, dtype_bytes, longest
        )
        self.max_cache_bytes = default_cache_bytes(str(generator.device))
        self._element_size = dtype_bytes
        size = generator.config.batch_size
        self.batches = (
            stem_batches(generator.prompts, size)
            if parts is None
            else stem_batches_within(generator.prompts, parts, size)
        )
        self._passes: list[SiteEdits | None] = []

    @timed(GENERATION)
    def run(
        self,
        passes: Sequence[SiteEdits | None],
        done: BatchDone | None = None,
        kept: Callable[[int], dict[str, Any] | None] | None = None,
        keep: Callable[[int, dict[str, Any]], None] | None = None,
        only: Collection[int] | None = None,
    ) -> list[Generations]:
        """Every pass's generations, in input order. ``kept(b)``/``keep(b, body)`` read and write a finished batch
        (the unit an interrupted run resumes from); ``done`` hears of each batch as it is read back or its last row
        ends (batches stepping together end in any order). ``only``: decode (or read back) just these batches, as one
        rank of a data-parallel run does (:mod:`interventions.parallel`); the other prompts' generations are then
        empty."""
        self._passes = list(passes)
        sources = Sources(self._passes)
        engine = BatchDecoder(self.stack, self.generator, self._passes, sources, self.max_batch_tokens)
        tally = _Tally.of(len(passes), len(self.generator.prompts))
        with (
            prepacked(self.model, *sources.models),
            arm_sites(self.model, self._passes, sources, self.attach, engine.segments),
        ):
            heard: list[int] = []  # the batches read back or decoded so far, in the order they ended

            def hear(number: int, body: dict[str, Any], read_back: bool = False) -> None:
                tally.add(members(self.batches[number]), body)
                heard.append(number)
                if done is not None:
                    done(len(heard), len(self.batches), len(members(self.batches[number])), body["seconds"], read_back)

            pending = []
            for number in (n for n in range(len(self.batches)) if only is None or n in only):
                body = self._kept(number, kept)
                if body is None:
                    pending.append(number)
                else:
                    hear(number, body, read_back=True)
            for group in self._together(pending, self._passes):
                self._decoded(engine, group, keep, hear)
        return tally.generations(self.generator)

    def _kept(self, number: int, kept: Callable[[int], dict[str, Any] | None] | None) -> dict[str, Any] | None:
        """Batch ``number``'s body as kept by an earlier run, where it still fits (else None: it is decoded)."""
        body = kept(number) if kept is not None else None
        prompts = members(self.batches[number])
        misfit = _misfit(body, len(self._passes), prompts, self._vocabulary()) if body is not None else None
        if misfit is not None:
            warn(f"the kept batch {number + 1} of {len(self.batches)} {misfit}; it is decoded again")
            return None
        return body

    def _together(self, pending: list[int], passes: Sequence[SiteEdits | None]) -> list[list[int]]:
        """The batches to decode, in groups decoded at once: consecutive batches whose caches, every pass's rows
        together, fit :attr:`max_cache_bytes` step as one (:meth:`BatchDecoder.decode_together`); a batch whose caches
        alone pass it (its passes then decode in chunks of arms, :meth:`arm_chunks`), and every batch where a pass
        reads a patch source, decodes on its own."""
        alone = bool(Sources(passes).models)
        groups: list[list[int]] = []
        held = 0
        for number in pending:
            size = self.cache_bytes(self.batches[number], passes)
            if alone or size > self.max_cache_bytes:
                groups.append([number])
                held = self.max_cache_bytes
            elif groups and held + size <= self.max_cache_bytes:
                groups[-1].append(number)
                held += size
            else:
                groups.append([number])
                held = size
        return groups

    def _decoded(
        self,
        engine: BatchDecoder,
        group: list[int],
        keep: Callable[[int, dict[str, Any]], None] | None,
        heard: Callable[[int, dict[str, Any]], None],
    ) -> None:
        """Decode the batches ``group``; each one's body (its tokens, broken logits, site counts and seconds per pass)
        is kept and ``heard`` as its last row ends, while the group's other batches decode on. A batch's seconds: the
        group's time until it ended, shared by the group's prompts (the last to end takes the rest: the group's
        seconds sum to its time), so that a pace read off the first batches to end holds for the rest."""
        batches = [self.batches[number] for number in group]
        start, prompts = time.perf_counter(), sum(len(members(batch)) for batch in batches)
        given: list[float] = []  # the seconds of the batches that ended

        def finished(index: int, result: Decoded) -> None:
            tokens, bad, counts = result
            elapsed = time.perf_counter() - start
            share = elapsed * len(members(batches[index])) / prompts
            given.append(elapsed - sum(given) if len(given) + 1 == len(group) else share)
            body = {
                "prompts": members(batches[index]),
                "tokens": tokens,
                "broken": bad,
                "stats": counts,
                "seconds": given[-1],
            }
            if keep is not None:
                keep(group[index], body)
            heard(group[index], body)

        if len(group) > 1:
            engine.decode_together(batches, list(range(len(self._passes))), self.fork_layer(self._passes), finished)
        else:
            finished(0, self._decode(engine, batches[0]))

    def _vocabulary(self) -> int:
        """How many token ids the model can emit (the rows of its output layer)."""
        head = self.model.get_output_embeddings()
        return int(head.weight.shape[0]) if head is not None else int(self.model.config.vocab_size)

    def fork_layer(self, passes: Sequence[SiteEdits | None]) -> int:
        """The lowest block any pass edits: the blocks below it run once per group of rows."""
        return min((first_edited_layer(p, self.total) for p in passes), default=self.total)

    def describe(self, passes: Sequence[SiteEdits | None]) -> str:
        fork = self.fork_layer(passes)
        shared = (
            f"blocks 0-{fork - 1} of {self.total} run once for all arms until their tokens differ"
            if fork
            else "every block is edited by some arm, so only the batching is shared"
        )
        groups = self._together(list(range(len(self.batches))), passes)
        if len(groups) == len(self.batches):
            return shared
        return f"{shared}; the batches take their decode steps together in {len(groups)} group(s) (their caches fit)"

    def estimate_seconds(self, passes: Sequence[SiteEdits | None]) -> float:
        """Decoding time at the pace of one timed prompt pass, counting every row to the token limit and no arm
        diverging; a decode step of one row through one block costs about :data:`DECODE_COST` prompt tokens', a
        figure fitted where rows stop after about two thirds of the limit (earlier stops make a run shorter, later
        ones and diverging arms longer). The pass timed is the first batch's longest prompt alone: a prompt's
        worth of tokens keeps the matrix products as efficient as a batch's, at a fraction of its cost (the whole
        first batch took 16 s of a default A/B's 8.4 min on 2 cores, work done again by the run)."""
        longest = max(self.generator.batches[0], key=lambda i: len(self.generator.prompts[i]))
        input_ids, mask = self.generator.padded([longest])
        start = time.perf_counter()
        with torch.no_grad():
            self.model(input_ids=input_ids, attention_mask=mask, logits_to_keep=1)
        per_token_block = (time.perf_counter() - start) / (mask.numel() * self.total)
        fork, arms = self.fork_layer(passes), len(passes)
        blocks = shared_passes(fork, arms, self.total) * self.total
        prompt_tokens = self.prompt_tokens()
        steps = len(self.generator.prompts) * self.generator.config.max_new_tokens
        return per_token_block * (prompt_tokens * blocks + steps * DECODE_COST * (blocks + arms * HEAD_BLOCKS))

    def prompt_tokens(self) -> int:
        """The prompt tokens one pass runs through each block: every stem once, and each prompt's remainder."""
        return stem_tokens(self.generator.prompts, self.batches)

    def padded_prompt_tokens(self) -> int:
        """The padded prompt tokens one pass runs: per batch, its stems and its prompts' remainders, each padded to the
        batch's longest."""
        return sum(
            sum(bool(s.length) for s in b) * self._widths(b)[0] + len(members(b)) * self._widths(b)[1]
            for b in self.batches
        )

    def _widths(self, batch: Sequence[Stem]) -> tuple[int, int]:
        """A batch's longest stem and longest remainder after its stem."""
        prompts = self.generator.prompts
        return max(s.length for s in batch), max(len(prompts[i]) - s.length for s in batch for i in s.members)

    def arm_chunks(self, n_prompts: int, longest: int) -> list[list[int]]:
        """The passes in groups whose rows' caches fit :func:`core.budget.default_cache_bytes` together (each group
        decodes a batch of prompts on its own; the blocks below the fork run once per group)."""
        upper = self.total - self.fork_layer(self._passes)
        per_row = self._position_bytes(max(1, upper)) * (longest + self.generator.config.max_new_tokens)
        per_chunk = max(1, self.max_cache_bytes // (per_row * n_prompts))
        arms = list(range(len(self._passes)))
        return [arms[i : i + per_chunk] for i in range(0, len(arms), per_chunk)]

    def cache_bytes(self, batch: Sequence[Stem], passes: Sequence[SiteEdits | None]) -> int:
        """The caches of every pass on ``batch`` at once: a row per prompt below the fork layer, a row per pass and
        prompt from it up, as wide as the batch's longest stem and remainder, with room for the new tokens."""
        fork = self.fork_layer(passes)
        width = sum(self._widths(batch)) + self.generator.config.max_new_tokens
        rows = self._position_bytes(fork) + len(passes) * self._position_bytes(self.total - fork)
        return len(members(batch)) * width * rows

    def _position_bytes(self, blocks: int) -> int:
        """One row's keys and values at one position through ``blocks`` blocks."""
        config = self.model.config
        heads = int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
        return blocks * 2 * heads * head_dim * self._element_size

    def _decode(self, engine: BatchDecoder, batch: Sequence[Stem]) -> Decoded:
        """Every pass's tokens, broken-logit counts and site counts on one batch of prompts, chunk of arms by chunk of
        arms."""
        tokens: list[list[list[int]]] = []
        broken: list[int] = []
        counts: list[dict[str, int]] = []
        for arms in self.arm_chunks(len(members(batch)), sum(self._widths(batch))):
            fork = self.fork_layer([self._passes[a] for a in arms])
            chunk = engine.decode(batch, arms, fork)
            tokens, broken, counts = tokens + chunk[0], broken + chunk[1], counts + chunk[2]
        return tokens, broken, counts


@dataclass
class _Tally:
    """Every pass's tokens per prompt, broken-logit count, site counts and seconds, summed over batches."""

    ids: list[list[list[int]]]
    broken: list[int]
    counts: list[dict[str, int]]  # what each pass's site functions saw
    seconds: float = 0.0

    @classmethod
    def of(cls, n_passes: int, n_prompts: int) -> _Tally:
        return cls(
            [[[] for _ in range(n_prompts)] for _ in range(n_passes)], [0] * n_passes, [{} for _ in range(n_passes)]
        )

    def add(self, batch: list[int], body: dict[str, Any]) -> None:
        """One batch's body (its prompts ``batch``)."""
        for arm, per_prompt in enumerate(body["tokens"]):
            for prompt, row in zip(batch, per_prompt, strict=True):
                self.ids[arm][prompt] = row
            self.broken[arm] += body["broken"][arm]
            for key, value in body["stats"][arm].items():
                self.counts[arm][key] = self.counts[arm].get(key, 0) + value
        self.seconds += body["seconds"]

    def generations(self, generator: Generator) -> list[Generations]:
        """Each pass's generations, the seconds shared evenly among the passes."""
        share = self.seconds / max(1, len(self.ids))
        return [
            generator.decode(ids, share, counts | {"degenerate_logits": broken})
            for ids, counts, broken in zip(self.ids, self.counts, self.broken, strict=True)
        ]


def _misfit(body: dict[str, Any], n_passes: int, prompts: list[int], vocabulary: int) -> str | None:
    """Why a kept batch cannot stand for this batch (None: it holds every pass's tokens for every prompt of it,
    each a token id of the model)."""
    tokens, broken, stats = body.get("tokens"), body.get("broken"), body.get("stats")
    if body.get("prompts") != prompts:
        return "holds other prompts"
    if not (
        isinstance(tokens, list)
        and isinstance(broken, list)
        and isinstance(stats, list)
        and len(tokens) == n_passes == len(broken) == len(stats)
        and all(isinstance(s, dict) for s in stats)
        and all(isinstance(t, list) and len(t) == len(prompts) and all(isinstance(r, list) for r in t) for t in tokens)
        and isinstance(body.get("seconds"), (int, float))
    ):
        return f"is not every pass's tokens for its {len(prompts)} prompts ({n_passes} passes)"
    ids = [i for per_prompt in tokens for row in per_prompt for i in row]
    if not all(type(i) is int and 0 <= i < vocabulary for i in ids):
        return f"holds token ids outside the model's vocabulary (0-{vocabulary - 1})"
    return None


def generate_unedited(
    generator: Generator,
    parts: Sequence[Sequence[int]] | None = None,
    part_done: Callable[[int, list[str]], None] | None = None,
) -> Generations:
    """One unedited pass over the generator's prompts: shared decoding where it applies (finished rows leave the batch,
    so a batch costs its rows' own lengths; batches within the cache budget step together), else the generator's own
    ``generate`` path, in its own batches. ``parts``: groups of prompts no shared batch mixes; ``part_done`` hears of
    each part (its index and its prompts' texts) as soon as its last prompt is decoded."""
    whole = parts if parts is not None else [range(len(generator.prompts))]
    if unshareable(generator.model, generator.config.do_sample, DEFAULT_DRIVER) is None:
        heard = _PartsHeard(generator, whole, part_done) if part_done is not None else None
        return SharedDecoder(generator, parts=parts).run([None], keep=heard)[0]
    result = generator.run()
    if part_done is not None:
        for index, part in enumerate(whole):
            part_done(index, [result.texts[i] for i in part])
    return result


class _PartsHeard:
    """A shared run's finished batches gathered into parts: each part's texts handed on once all its prompts are in."""

    def __init__(
        self, generator: Generator, parts: Sequence[Sequence[int]], part_done: Callable[[int, list[str]], None]
    ) -> None:
        self.generator, self.parts, self.part_done = generator, parts, part_done
        self.ids: dict[int, list[int]] = {}
        self.waiting = set(range(len(parts)))

    def __call__(self, number: int, body: dict[str, Any]) -> None:  # noqa: ARG002 - a keep hook's signature
        self.ids.update(zip(body["prompts"], body["tokens"][0], strict=True))
        for index in sorted(self.waiting):
            if all(prompt in self.ids for prompt in self.parts[index]):
                self.waiting.discard(index)
                texts = self.generator.decode([self.ids[p] for p in self.parts[index]], 0.0).texts
                self.part_done(index, texts)
