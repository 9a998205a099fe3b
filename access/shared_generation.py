"""Many arms per pass: every arm of one model decodes greedily in shared batches, computing once what arms share.

An A/B run generates the same prompts once per arm: the baseline, the main arm, its controls and
doses, and 20 placebo arms. The arms differ only from the lowest block any of them edits (the
*fork layer*; the selected units of a real pair sit in its upper layers), and most placebo rows
decode the baseline's own tokens for most of their steps. :class:`SharedDecoder` decodes all arms
of one model together, batch of prompts by batch of prompts:

* **rows.** Each (arm, prompt) is one row of the upper blocks (fork layer and above), which carry
  each arm's edits on its own rows (:meth:`SharedDecoder._dispatch`); rows are kept arm-major, so an
  arm's rows are one slice and its site functions run on that slice unchanged.
* **groups.** Rows with the same tokens so far form one *group*; the blocks below the fork layer run
  once per group and their keys and values are kept once per group. All arms of a prompt start in
  one group; when their next tokens differ, the group forks and the new groups copy its cache.
* **stems.** Prompts that begin alike (the same system turn, the same passage) are batched together
  (:func:`stem_batches`); their shared first tokens, the *stem*, run once per arm, and each prompt's
  own remainder runs over the stem's keys and values (:class:`_Seed`). The A/B prompts of the default
  pair share about a third of their tokens this way.
* **finished rows** (a stop token, or ``max_new_tokens``) leave the batch; their rows and groups are
  dropped from the caches once an eighth of the rows have finished.
* **budget.** Multi-token forwards (the prompt pass) run in slices of rows of at most the token
  budget of :func:`core.budget.default_max_batch_tokens`; their caches are joined afterwards. When
  the rows' caches would pass :func:`core.budget.default_cache_bytes`, the passes decode a batch of
  prompts in groups of arms (:meth:`SharedDecoder.arm_chunks`), each running the shared blocks once.

Decoding reproduces ``generate``'s greedy path: left padding, positions
from the attention mask, masks built by the model's own ``create_causal_mask``, float32 argmax of
the last position's logits, responses cut at the first stop token. Each block computes the same
function of the same inputs for every row, so in float32 every arm's tokens equal those of the arm
run alone up to kernel rounding (the batches are the generator's where no prompts share a stem):
CPU matrix products give bit-identical rows only for some row counts
(``benchmarks/bench_interventions.py`` prints any token that differs on the default pair).

* **patch sources.** A patch (an edit whose context is a source model run in lockstep) joins the
  shared batches too: each source runs once per group, up to its highest patched block, with a cache
  that forks with the group's; before a patch arm's site function runs, its lockstep holds the
  source's values at its units for exactly that arm's rows.

What cannot be shared decodes arm by arm (:func:`unshareable` says why): sampling, the nnsight
backend, other contexts around generation, architectures whose forward this module does not
reproduce, and generation configs with logits processors.

Example:
    >>> system = list(range(100, 120))   # 20 tokens that prompts 0 and 2 begin with
    >>> stem_batches([[*system, 1, 2], [7, 8, 9], [*system, 3]], batch_size=4)
    [[Stem(length=20, members=(0, 2))], [Stem(length=0, members=(1,))]]
    >>> decoder = SharedDecoder(generator)   # doctest: +SKIP
    >>> base, ablated = decoder.run([None, site_edits(model, [Scale(units, 0.0)])])   # doctest: +SKIP
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch
from einops import rearrange, reduce
from torch import nn

from access.driver_table import DEFAULT_DRIVER, driver
from access.drivers.base import SiteEdits
from access.generation import Generations, Generator
from access.hook_points import attach, families
from access.lockstep import Lockstep
from core.budget import default_cache_bytes, default_max_batch_tokens
from core.chat import left_pad
from core.models import warn

if TYPE_CHECKING:
    from transformers import PreTrainedModel


# attach(model, hook, layer, fn) -> a handle with remove(): where a site's function runs (access.hook_points.attach)
Attach = Callable[["PreTrainedModel", str, int, Callable[[torch.Tensor], torch.Tensor | None]], Any]


class Decoder(Protocol):
    """What this module runs of ``model.get_decoder()`` (the decoder stack of a shared architecture)."""

    @property
    def embed_tokens(self) -> nn.Module: ...

    @property
    def layers(self) -> nn.ModuleList: ...

    @property
    def norm(self) -> nn.Module: ...

    @property
    def rotary_emb(self) -> nn.Module: ...


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
MIN_STEM = 16  # tokens prompts must share for their stem to run once (a shorter one is not worth its own pass)
COMPACT_SHARE = 8  # drop finished rows from the caches once 1/8 of the rows have finished
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
    model_type = getattr(model.config, "model_type", "")
    if model_type not in families("shared_decoding"):
        return (
            f"model type {model_type!r} decodes arm by arm (shared decoding reproduces "
            f"{', '.join(families('shared_decoding'))})"
        )
    if set(getattr(model.config, "layer_types", None) or ["full_attention"]) != {"full_attention"}:
        return "sliding-window attention layers decode arm by arm"
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


@dataclass(frozen=True)
class Stem:
    """Prompts (indices) that share their first ``length`` tokens, which run once for all of them (0: no shared run)."""

    length: int
    members: tuple[int, ...]


def stem_batches(prompts: Sequence[list[int]], batch_size: int) -> list[list[Stem]]:
    """The prompts in batches of at most ``batch_size``, as stems.

    In token order, a prompt joins the group before it while that raises the tokens the group shares,
    (members - 1) x the stem's length, with at least :data:`MIN_STEM` shared; each prompt keeps at least
    its last token to itself. Groups are batched whole, by their longest remainder. Prompts that share no
    stem batch by length, as :class:`~access.generation.Generator` batches them.
    """
    groups: list[tuple[int, list[int]]] = []  # (tokens shared, prompts)
    for index in sorted(range(len(prompts)), key=lambda i: list(prompts[i])):
        if groups and len(groups[-1][1]) < batch_size:
            length, group = groups[-1]
            common = min(
                len(os.path.commonprefix([prompts[group[0]], prompts[index]])),  # noqa: RUF071 - token ids, as meant
                len(prompts[index]) - 1,
                length,
            )
            if common >= MIN_STEM and len(group) * common > (len(group) - 1) * length:
                groups[-1] = (common, [*group, index])
                continue
        groups.append((len(prompts[index]) - 1, [index]))
    stems = [Stem(length, tuple(sorted(group))) for length, group in groups if len(group) > 1]
    stems.sort(key=lambda s: (max(len(prompts[i]) for i in s.members) - s.length, s.members[0]))
    lonely = sorted(
        (Stem(0, (g[0],)) for _, g in groups if len(g) == 1), key=lambda s: (len(prompts[s.members[0]]), s.members[0])
    )
    batches: list[list[Stem]] = []
    for stem in stems + lonely:
        size = sum(len(s.members) for s in batches[-1]) if batches else batch_size
        if size + len(stem.members) > batch_size or (batches and bool(batches[-1][0].length) != bool(stem.length)):
            batches.append([])
        batches[-1].append(stem)
    return batches


def members(batch: Sequence[Stem]) -> list[int]:
    """The prompts of a batch of stems, in the order their rows run."""
    return [i for stem in batch for i in stem.members]


@dataclass
class _Batch:
    """The state of one batch of prompts while its arms decode."""

    prompt_mask: torch.Tensor  # [B, T + step]: the prompts' padding, then the generated tokens
    last_position: torch.Tensor  # [B]: each prompt's last position
    row_arm: list[int]  # per row (arm-major)
    row_prompt: list[int]
    row_group: list[int]
    row_alive: list[bool]
    group_prompt: list[int]
    group_input: torch.Tensor  # [G, q]: the tokens each group feeds next
    tokens: list[list[list[int]]]  # [arm][prompt] -> generated ids
    lower: Any = None  # DynamicCache of the blocks below the fork layer, one row per group
    upper: Any = None  # DynamicCache of the fork layer and above, one row per row
    # per patch source: DynamicCache of its blocks up to its top site, per group
    sources: list[Any] = field(default_factory=list)
    row_group_index: torch.Tensor | None = None  # row_group as a tensor, for the forward running now
    source_needed: set[int] = field(default_factory=set)  # the patch sources these arms read
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)  # arm -> its rows


class SharedDecoder:
    """Greedy decoding of many passes (compiled edits, or ``None`` for unedited)
    over one :class:`Generator`'s prompts."""

    def __init__(self, generator: Generator, max_batch_tokens: int | None = None, attach: Attach = attach) -> None:
        """``attach`` places the passes' site functions (the torch driver's hooks)."""
        self.generator, self.model, self.attach = generator, generator.model, attach
        self.decoder = self.model.get_decoder()
        self.total = int(self.model.config.num_hidden_layers)
        longest = max(len(p) for p in generator.prompts) + generator.config.max_new_tokens
        dtype_bytes = next(self.model.parameters()).element_size()
        self.max_batch_tokens = max_batch_tokens or default_max_batch_tokens(
            str(generator.device), self.model.config, dtype_bytes, longest
        )
        self.max_cache_bytes = default_cache_bytes(str(generator.device))
        self._element_size = dtype_bytes
        self.batches = stem_batches(generator.prompts, generator.config.batch_size)
        self._passes: list[SiteEdits | None] = []
        self._state: _Batch | None = None
        self._sources = _Sources([])
        self._offset = (
            0  # the first row, among the batch's rows, of the forward running now (a prompt pass runs in slices)
        )

    def run(
        self,
        passes: Sequence[SiteEdits | None],
        done: BatchDone | None = None,
        kept: Callable[[int], dict[str, Any] | None] | None = None,
        keep: Callable[[int, dict[str, Any]], None] | None = None,
        only: Collection[int] | None = None,
    ) -> list[Generations]:
        """Every pass's generations, in input order. ``kept(b)``/``keep(b, body)`` read and write a finished batch
        (the unit an interrupted run resumes from); ``done`` hears of each batch. ``only``: decode (or read back)
        just these batches, as one rank of a data-parallel run does (:mod:`interventions.parallel`); the other
        prompts' generations are then empty."""
        self._passes = list(passes)
        self._sources = _Sources(self._passes)
        n_prompts = len(self.generator.prompts)
        ids: list[list[list[int]]] = [[[] for _ in range(n_prompts)] for _ in passes]
        broken = [0] * len(passes)
        counts: list[dict[str, int]] = [{} for _ in passes]  # what each pass's site functions saw, summed over batches
        seconds = 0.0
        with self._hooks():
            for number, stems in enumerate(self.batches):
                if only is not None and number not in only:
                    continue
                batch = members(stems)
                body = kept(number) if kept is not None else None
                misfit = _misfit(body, len(passes), batch, self._vocabulary()) if body is not None else None
                if misfit is not None:
                    warn(f"the kept batch {number + 1} of {len(self.batches)} {misfit}; it is decoded again")
                    body = None
                if body is None:
                    start, before = time.perf_counter(), [_stats(p) for p in passes]
                    tokens, bad = self._decode(stems)
                    counted = [
                        {k: v - b.get(k, 0) for k, v in _stats(p).items()} for p, b in zip(passes, before, strict=True)
                    ]
                    body = {
                        "prompts": batch,
                        "tokens": tokens,
                        "broken": bad,
                        "stats": counted,
                        "seconds": time.perf_counter() - start,
                    }
                    if keep is not None:
                        keep(number, body)
                    body["fresh"] = True
                for arm, per_prompt in enumerate(body["tokens"]):
                    for prompt, row in zip(batch, per_prompt, strict=True):
                        ids[arm][prompt] = row
                    broken[arm] += body["broken"][arm]
                    for key, value in body["stats"][arm].items():
                        counts[arm][key] = counts[arm].get(key, 0) + value
                seconds += body["seconds"]
                if done is not None:
                    done(
                        number + 1,
                        len(self.batches),
                        len(batch),
                        body["seconds"],
                        kept is not None and "fresh" not in body,
                    )
                body.pop("fresh", None)
        share = seconds / max(1, len(passes))
        out = []
        for arm in range(len(passes)):
            out.append(self.generator.decode(ids[arm], share, counts[arm] | {"degenerate_logits": broken[arm]}))
        return out

    def _vocabulary(self) -> int:
        """How many token ids the model can emit (the rows of its output layer)."""
        head = self.model.get_output_embeddings()
        return int(head.weight.shape[0]) if head is not None else int(self.model.config.vocab_size)

    def fork_layer(self, passes: Sequence[SiteEdits | None]) -> int:
        """The lowest block any pass edits: the blocks below it run once per group of rows."""
        return min((first_edited_layer(p, self.total) for p in passes), default=self.total)

    def describe(self, passes: Sequence[SiteEdits | None]) -> str:
        fork = self.fork_layer(passes)
        return (
            f"blocks 0-{fork - 1} of {self.total} run once for all arms until their tokens differ"
            if fork
            else "every block is edited by some arm, so only the batching is shared"
        )

    def estimate_seconds(self, passes: Sequence[SiteEdits | None]) -> float:
        """Decoding time at the pace of one timed prompt pass of the first batch, counting every row to the token limit
        and no arm diverging; a decode step of one row through one block costs about :data:`DECODE_COST` prompt
        tokens', a figure fitted where rows stop after about two thirds of the limit (earlier stops make a run
        shorter, later ones and diverging arms longer)."""
        input_ids, mask = self.generator.padded(self.generator.batches[0])
        start = time.perf_counter()
        with torch.no_grad():
            self.model(input_ids=input_ids, attention_mask=mask, logits_to_keep=1)
        per_token_block = (time.perf_counter() - start) / (mask.numel() * self.total)
        fork, arms = self.fork_layer(passes), len(passes)
        blocks = fork + arms * (self.total - fork)
        prompt_tokens = self.prompt_tokens()
        steps = len(self.generator.prompts) * self.generator.config.max_new_tokens
        return per_token_block * (prompt_tokens * blocks + steps * DECODE_COST * (blocks + arms * HEAD_BLOCKS))

    def prompt_tokens(self) -> int:
        """The prompt tokens one pass runs through each block: every stem once, and each prompt's remainder."""
        prompts = self.generator.prompts
        return sum(s.length + sum(len(prompts[i]) - s.length for i in s.members) for b in self.batches for s in b)

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

    # --- one batch of prompts ---------------------------------------------------------------------

    @torch.no_grad()
    def arm_chunks(self, n_prompts: int, longest: int) -> list[list[int]]:
        """The passes in groups whose rows' caches fit :func:`core.budget.default_cache_bytes` together (each group
        decodes a batch of prompts on its own; the blocks below the fork run once per group)."""
        config = self.model.config
        heads = int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
        upper = self.total - self.fork_layer(self._passes)
        per_row = (
            max(1, upper) * 2 * heads * head_dim * (longest + self.generator.config.max_new_tokens) * self._element_size
        )
        per_chunk = max(1, self.max_cache_bytes // (per_row * n_prompts))
        arms = list(range(len(self._passes)))
        return [arms[i : i + per_chunk] for i in range(0, len(arms), per_chunk)]

    def _decode(self, batch: Sequence[Stem]) -> tuple[list[list[list[int]]], list[int]]:
        tokens: list[list[list[int]]] = []
        broken: list[int] = []
        for arms in self.arm_chunks(len(members(batch)), sum(self._widths(batch))):
            chunk_tokens, chunk_broken = self._decode_arms(batch, arms)
            tokens += chunk_tokens
            broken += chunk_broken
        return tokens, broken

    def _decode_arms(self, batch: Sequence[Stem], arms: list[int]) -> tuple[list[list[list[int]]], list[int]]:
        """Decode passes ``arms`` on one batch of prompts: their tokens and broken-logit counts in ``arms`` order."""
        prompts = [self.generator.prompts[i] for i in members(batch)]
        n_arms, n_prompts = len(arms), len(prompts)
        local = {arm: k for k, arm in enumerate(arms)}
        fork = self.fork_layer([self._passes[a] for a in arms])
        shared = [stem for stem in batch if stem.length]
        stem_of: list[int] = []  # per prompt: its stem among ``shared`` (-1: none)
        for stem in batch:
            stem_of += [shared.index(stem) if stem.length else -1] * len(stem.members)
        lengths = [stem.length for stem in batch for _ in stem.members]
        input_ids, mask = left_pad(
            [p[n:] for p, n in zip(prompts, lengths, strict=True)], self.generator.pad_id, self.generator.device
        )
        positions = _positions(mask) + rearrange(torch.tensor(lengths, device=mask.device), "p -> p 1") * mask
        last = torch.tensor([len(p) - 1 for p in prompts], device=mask.device)
        state = self._state = self._start(arms, input_ids, mask, last)
        if shared:
            self._run_stems(state, arms, shared, stem_of, fork)
        broken = [0] * n_arms
        allow_skip = bool(state.prompt_mask.all())  # generate's own mask decision for a batch: no padding, no mask
        stop, limit = self.generator.stop, self.generator.config.max_new_tokens
        for step in range(limit):
            group_positions = (
                positions[state.group_prompt]
                if step == 0
                else rearrange(state.last_position[state.group_prompt] + step, "g -> g 1")
            )
            hidden = self._step(state, group_positions, fork, allow_skip)
            logits = self.model.get_output_embeddings()(self.decoder.norm(hidden[:, -1:]))[:, -1].to(torch.float32)
            flat = reduce(logits, "r v -> r", "max") == reduce(logits, "r v -> r", "min")
            bad = (reduce(~torch.isfinite(logits), "r v -> r", "any") | flat).tolist()
            chosen = logits.argmax(-1).tolist()
            for row, (token, is_bad) in enumerate(zip(chosen, bad, strict=True)):
                if not state.row_alive[row]:
                    continue
                arm, prompt = local[state.row_arm[row]], state.row_prompt[row]
                broken[arm] += int(is_bad)
                if token in stop:
                    state.row_alive[row] = False
                    continue
                state.tokens[arm][prompt].append(token)
                if len(state.tokens[arm][prompt]) >= limit:
                    state.row_alive[row] = False
            if not any(state.row_alive):
                break
            state.prompt_mask = torch.cat([state.prompt_mask, state.prompt_mask.new_ones(n_prompts, 1)], dim=1)
            self._regroup(state, chosen)
        self._state = None
        return state.tokens, broken

    def _step(self, state: _Batch, group_positions: torch.Tensor, fork: int, allow_skip: bool) -> torch.Tensor:
        """One forward of every row (the groups' next tokens): the top block's output, a row per row."""
        self._run_sources(state, group_positions, allow_skip)
        hidden = self.decoder.embed_tokens(state.group_input)
        hidden, state.lower = self._blocks(
            hidden, range(fork), state.group_prompt, group_positions, state.lower, allow_skip
        )
        state.row_group_index = torch.tensor(state.row_group, device=hidden.device)
        hidden = hidden.index_select(0, state.row_group_index)
        row_positions = group_positions.index_select(0, state.row_group_index)
        hidden, state.upper = self._blocks(
            hidden, range(fork, self.total), state.row_prompt, row_positions, state.upper, allow_skip
        )
        return hidden

    def _run_stems(self, state: _Batch, arms: list[int], shared: list[Stem], stem_of: list[int], fork: int) -> None:
        """Run each shared stem once per arm, and seed ``state``'s caches with them: each prompt's rows start from its
        stem's keys and values (a prompt with no stem from padding), its mask from the stem's."""
        prompts = self.generator.prompts
        ids, mask = left_pad(
            [prompts[stem.members[0]][: stem.length] for stem in shared],
            self.generator.pad_id,
            state.prompt_mask.device,
        )
        n_arms, n_stems = len(arms), len(shared)
        stems = self._state = self._start(arms, ids, mask, mask.new_zeros(n_stems))
        self._step(stems, _positions(mask), fork, bool(mask.all()))
        self._state = state
        per_row = [stem + (arm * n_stems if stem >= 0 else 0) for arm in range(n_arms) for stem in stem_of]
        state.lower = _Seed.of(stems.lower, range(fork), stem_of)
        state.upper = _Seed.of(stems.upper, range(fork, self.total), per_row)
        state.sources = [
            _Seed.of(cache, range(top + 1), stem_of)
            for cache, top in zip(stems.sources, self._sources.tops, strict=True)
        ]
        seen = mask.index_select(0, torch.tensor([max(k, 0) for k in stem_of], device=mask.device))
        seen = seen * rearrange(torch.tensor([k >= 0 for k in stem_of], device=mask.device), "p -> p 1")
        state.prompt_mask = torch.cat([seen.to(state.prompt_mask.dtype), state.prompt_mask], dim=1)

    def _start(self, arms: list[int], inputs: torch.Tensor, mask: torch.Tensor, last: torch.Tensor) -> _Batch:
        """A batch of every arm's row of each prompt of ``inputs`` (arm-major), each prompt its own group."""
        n = inputs.shape[0]
        state = _Batch(
            prompt_mask=mask,
            last_position=last,
            row_arm=[a for a in arms for _ in range(n)],
            row_prompt=list(range(n)) * len(arms),
            row_group=list(range(n)) * len(arms),
            row_alive=[True] * (len(arms) * n),
            group_prompt=list(range(n)),
            group_input=inputs,
            tokens=[[[] for _ in range(n)] for _ in arms],
        )
        state.source_needed = {self._sources.lockstep[a][1] for a in arms if a in self._sources.lockstep}
        self._set_spans(state)
        return state

    def _regroup(self, state: _Batch, chosen: list[int]) -> None:
        """Fork each group whose live rows chose different tokens; drop finished rows once enough have finished."""
        entries: list[tuple[int, int]] = []  # (source group, next token) per new group
        where: dict[tuple[int, int], int] = {}
        first_of: dict[int, int] = {}
        for row, group in enumerate(state.row_group):
            if state.row_alive[row] and (group, chosen[row]) not in where:
                where[(group, chosen[row])] = len(entries)
                first_of.setdefault(group, len(entries))
                entries.append((group, chosen[row]))
        # a group whose rows all finished keeps its rows fed until they are dropped
        for group in range(len(state.group_prompt)):
            if group not in first_of:
                first_of[group] = len(entries)
                entries.append((group, int(state.group_input[group, -1].item())))
        state.row_group = [
            where.get((g, chosen[r]), first_of[g]) if state.row_alive[r] else first_of[g]
            for r, g in enumerate(state.row_group)
        ]
        sources = [group for group, _ in entries]
        if sources != list(range(len(state.group_prompt))):
            for cache in [state.lower, *state.sources]:
                _select(cache, sources, state.group_input.device)
        state.group_prompt = [state.group_prompt[g] for g in sources]
        state.group_input = torch.tensor([[token] for _, token in entries], device=state.group_input.device)
        finished = state.row_alive.count(False)
        if finished and finished * COMPACT_SHARE >= len(state.row_alive):
            self._compact(state)

    def _compact(self, state: _Batch) -> None:
        keep = [row for row, alive in enumerate(state.row_alive) if alive]
        _select(state.upper, keep, state.group_input.device)
        groups = sorted({state.row_group[row] for row in keep})
        renumber = {old: new for new, old in enumerate(groups)}
        if groups != list(range(len(state.group_prompt))):
            for cache in [state.lower, *state.sources]:
                _select(cache, groups, state.group_input.device)
            state.group_prompt = [state.group_prompt[g] for g in groups]
            state.group_input = state.group_input[groups]
        state.row_arm = [state.row_arm[r] for r in keep]
        state.row_prompt = [state.row_prompt[r] for r in keep]
        state.row_group = [renumber[state.row_group[r]] for r in keep]
        state.row_alive = [True] * len(keep)
        self._set_spans(state)

    def _set_spans(self, state: _Batch) -> None:
        state.spans = {}
        for row, arm in enumerate(state.row_arm):
            start, _ = state.spans.get(arm, (row, row))
            state.spans[arm] = (start, row + 1)

    # --- blocks -----------------------------------------------------------------------------------

    def _blocks(
        self,
        hidden: torch.Tensor,
        layers: range,
        row_prompt: list[int],
        positions: torch.Tensor,
        cache: Any,
        allow_skip: bool,
        decoder: Decoder | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """Run ``layers`` of ``decoder`` (default: the model's) on ``hidden`` (rows of prompts ``row_prompt``) with
        ``cache``; a prompt pass (no cache yet, or one seeded with stems) runs in budgeted slices of rows."""
        if not layers:
            return hidden, cache
        decoder = decoder if decoder is not None else self.decoder
        if cache is not None and not isinstance(cache, _Seed):
            return self._forward(decoder, hidden, layers, row_prompt, positions, cache, allow_skip), cache
        rows, length = hidden.shape[0], hidden.shape[1]
        step = max(1, self.max_batch_tokens // max(1, length))
        if step >= rows and cache is None:
            cache = self._new_cache(self.generator.config.max_new_tokens)
            return self._forward(decoder, hidden, layers, row_prompt, positions, cache, allow_skip), cache
        parts, caches = [], []
        for start in range(0, rows, step):
            part = slice(start, start + step)
            caches.append(cache.take(part, self._new_cache()) if cache is not None else self._new_cache())
            parts.append(
                self._forward(
                    decoder, hidden[part], layers, row_prompt[part], positions[part], caches[-1], allow_skip, start
                )
            )
        return torch.cat(parts), _joined(caches, layers, self._new_cache(self.generator.config.max_new_tokens))

    def _forward(
        self,
        decoder: Decoder,
        hidden: torch.Tensor,
        layers: range,
        row_prompt: list[int],
        positions: torch.Tensor,
        cache: Any,
        allow_skip: bool,
        offset: int = 0,
    ) -> torch.Tensor:
        """One forward of ``layers``; ``offset``: the first of the batch's rows in ``hidden`` (for the edits)."""
        assert self._state is not None
        mask_2d = self._state.prompt_mask.index_select(0, torch.tensor(row_prompt, device=hidden.device))
        self._offset = offset
        hidden, _ = run_blocks(self.model, decoder, hidden, layers, mask_2d, positions, cache, allow_skip=allow_skip)
        return hidden

    def _run_sources(self, state: _Batch, positions: torch.Tensor, allow_skip: bool) -> None:
        """Each patch source on the groups' tokens, up to its highest site;
        its values there are kept for the patch arms."""
        if not state.sources:
            state.sources = [None] * len(self._sources.models)
        for k, (model, top) in enumerate(zip(self._sources.models, self._sources.tops, strict=True)):
            if k not in state.source_needed:
                continue
            self._sources.reset(k)
            decoder = model.get_decoder()
            hidden = decoder.embed_tokens(state.group_input)
            _, state.sources[k] = self._blocks(
                hidden, range(top + 1), state.group_prompt, positions, state.sources[k], allow_skip, decoder
            )
            self._sources.join(k)

    def _new_cache(self, reserve: int = 0) -> Any:
        """An empty cache; with ``reserve``, its layers keep room for that many more positions (in place)."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        if reserve:
            cache.layers = [_growing_layer_class()(reserve) for _ in cache.layers]
        return cache

    # --- edits ------------------------------------------------------------------------------------

    @contextmanager
    def _hooks(self) -> Iterator[None]:
        """One hook per edited site, running each arm's site function on that arm's rows."""
        by_site: dict[tuple[str, int], list[tuple[int, Callable[[torch.Tensor], torch.Tensor]]]] = {}
        for arm, edits in enumerate(self._passes):
            for hook, layer, fn in edits.sites if edits is not None else []:
                by_site.setdefault((hook, layer), []).append((arm, fn))
        with ExitStack() as stack:
            for (hook, layer), fns in by_site.items():
                stack.callback(self.attach(self.model, hook, layer, self._dispatch(fns)).remove)
            for k, model in enumerate(self._sources.models):
                for hook, layer in self._sources.sites[k]:
                    stack.callback(self.attach(model, hook, layer, self._sources.capture(k, hook, layer)).remove)
            yield

    def _dispatch(
        self, fns: list[tuple[int, Callable[[torch.Tensor], torch.Tensor]]]
    ) -> Callable[[torch.Tensor], torch.Tensor]:
        def fn(x: torch.Tensor) -> torch.Tensor:
            state = self._state
            assert state is not None, "shared decoding hooks fire only inside a batch"
            offset = self._offset
            for arm, site in fns:
                start, stop = state.spans.get(arm, (0, 0))
                start, stop = max(start - offset, 0), min(stop - offset, x.shape[0])
                if start >= stop:
                    continue
                part = x[start:stop]
                if arm in self._sources.lockstep:
                    assert state.row_group_index is not None
                    self._sources.fill(arm, state.row_group_index[start + offset : stop + offset])
                new = site(part)
                if new is not part:
                    part.copy_(new)
            return x

        return fn


class _Sources:
    """The patch sources of the passes: each runs once per group of rows (rows with the same tokens so far see the same
    source values), and each patch pass's lockstep gets, per forward, its source's values at its units for its rows."""

    def __init__(self, passes: Sequence[SiteEdits | None]) -> None:
        self.models: list[PreTrainedModel] = []
        self.sites: list[set[tuple[str, int]]] = []
        self.lockstep: dict[int, tuple[Any, int]] = {}  # pass -> (its lockstep, its source's index)
        for number, edits in enumerate(passes):
            around = edits.around if edits is not None else None
            if not isinstance(around, Lockstep):
                continue
            k = next((i for i, m in enumerate(self.models) if m is around.source), len(self.models))
            if k == len(self.models):
                self.models.append(around.source)
                self.sites.append(set())
            self.sites[k] |= set(around.sites)
            self.lockstep[number] = (around, k)
        self.tops = [max(layer for _, layer in sites) for sites in self.sites]
        self._parts: list[dict[tuple[str, int], list[torch.Tensor]]] = [{} for _ in self.models]
        self.values: list[dict[tuple[str, int], torch.Tensor]] = [{} for _ in self.models]

    def reset(self, k: int) -> None:
        self._parts[k] = {site: [] for site in self.sites[k]}

    def capture(self, k: int, hook: str, layer: int) -> Callable[[torch.Tensor], None]:
        def keep(x: torch.Tensor) -> None:
            self._parts[k][(hook, layer)].append(x)

        return keep

    def join(self, k: int) -> None:
        """The slices of one source forward, as one tensor per site (the rows of every group, in order)."""
        self.values[k] = {
            site: torch.cat(parts) if len(parts) > 1 else parts[0] for site, parts in self._parts[k].items()
        }
        self._parts[k] = {}

    def fill(self, number: int, groups: torch.Tensor) -> None:
        """Pass ``number``'s lockstep values for the rows whose groups are ``groups``:
        its units of its source's values."""
        lockstep, k = self.lockstep[number]
        lockstep.values = {
            site: self.values[k][site].index_select(0, groups).index_select(-1, units.to(groups.device))
            for site, units in lockstep.sites.items()
        }


@functools.cache
def _growing_layer_class() -> type:
    """A ``DynamicLayer`` whose keys and values are views of buffers with room for ``reserve`` more positions: a decode
    step writes its position in place where ``DynamicLayer`` copies the whole cache (``torch.cat``), which cost 14% of a
    shared decode on 2 CPU cores. The values, and so the attention over them, are the same."""
    from transformers.cache_utils import DynamicLayer

    class _GrowingLayer(DynamicLayer):
        def __init__(self, reserve: int) -> None:
            # transformers' unannotated __init__: untyped_calls_exclude does not reach a super() call
            super().__init__()  # type: ignore[no-untyped-call]
            self.reserve = reserve
            self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            start = self.get_seq_length()
            end = start + key_states.shape[-2]
            if self._buffers is None or end > self._buffers[0].shape[-2]:
                capacity = end + self.reserve
                self._buffers = (
                    _with_room(self.keys, key_states, start, capacity),
                    _with_room(self.values, value_states, start, capacity),
                )
            keys, values = self._buffers
            keys[..., start:end, :] = key_states
            values[..., start:end, :] = value_states
            self.keys, self.values = keys[..., :end, :], values[..., :end, :]
            return self.keys, self.values

        def reset(self) -> None:
            self._buffers = None
            super().reset()

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self._buffers is not None and self.get_seq_length() > 0:
                end = self.get_seq_length()
                self._buffers = (self._buffers[0][indices, ...], self._buffers[1][indices, ...])
                self.keys, self.values = self._buffers[0][..., :end, :], self._buffers[1][..., :end, :]

    return _GrowingLayer


def _with_room(old: torch.Tensor | None, new: torch.Tensor, start: int, capacity: int) -> torch.Tensor:
    """A buffer of ``capacity`` positions for rows shaped like ``new``, holding ``old``'s first ``start`` positions."""
    shape = (*new.shape[:-2], capacity, new.shape[-1])
    buffer = new.new_empty(shape)
    if start and old is not None:
        buffer[..., :start, :] = old[..., :start, :]
    return buffer


def _stats(edits: SiteEdits | None) -> dict[str, int]:
    return edits.stats.as_dict() if edits is not None and edits.stats is not None else {}


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


def _select(cache: Any, indices: list[int], device: torch.device) -> None:
    if cache is not None:
        cache.batch_select_indices(torch.tensor(indices, device=device))


@dataclass
class _Seed:
    """Where a prompt pass's rows start: row ``r`` from ``cache``'s row ``rows[r]`` (its stem's keys and values;
    -1: none, which the mask hides), for ``layers``."""

    cache: Any
    layers: range
    rows: torch.Tensor
    _padded: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    @classmethod
    def of(cls, cache: Any, layers: range, rows: list[int]) -> _Seed | None:
        if cache is None:
            return None
        return cls(cache, layers, torch.tensor(rows, device=cache.layers[layers.start].keys.device))

    def take(self, part: slice, into: Any) -> Any:
        """``into`` holding the stems of rows ``part``."""
        for index in self.layers:
            if index not in self._padded:  # a last row of zeros, for the rows without a stem
                layer = self.cache.layers[index]
                self._padded[index] = (_zero_row(layer.keys), _zero_row(layer.values))
            keys, values = self._padded[index]
            rows = self.rows[part].remainder(keys.shape[0])
            into.update(keys.index_select(0, rows), values.index_select(0, rows), index)
        return into


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """Each token's position in its left-padded row (0 at the padding)."""
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)


def _zero_row(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, x.new_zeros(1, *x.shape[1:])])


def _joined(caches: list[Any], layers: range, into: Any) -> Any:
    """One cache holding the rows of ``caches`` in order (each filled for ``layers`` by one slice's forward)."""
    for index in layers:
        keys = torch.cat([c.layers[index].keys for c in caches])
        values = torch.cat([c.layers[index].values for c in caches])
        into.update(keys, values, index)
    return into


def generate_unedited(generator: Generator) -> Generations:
    """One unedited pass over the generator's prompts: shared decoding where it applies (finished rows leave the batch,
    so a batch costs its rows' own lengths), else the generator's own ``generate`` path."""
    if unshareable(generator.model, generator.config.do_sample, DEFAULT_DRIVER) is None:
        return SharedDecoder(generator).run([None])[0]
    return generator.run()


def run_blocks(
    model: PreTrainedModel,
    decoder: Any,
    hidden: torch.Tensor,
    layers: range,
    mask_2d: torch.Tensor,
    positions: torch.Tensor,
    cache: Any,
    *,
    allow_skip: bool,
    keep: Collection[int] = (),
) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """The decoder's blocks ``layers`` on ``hidden`` with one causal mask and one rotary embedding for them all (the
    shared decoding engine and :mod:`access.forced_passes` run blocks this way); ``keep``: the block indices (and
    ``layers.stop``) whose *input* hidden states to return as well."""
    from transformers.masking_utils import create_causal_mask

    kept: dict[int, torch.Tensor] = {}
    if layers:
        mask = create_causal_mask(
            config=model.config,
            inputs_embeds=hidden,
            attention_mask=mask_2d,
            past_key_values=cache,
            position_ids=positions,
            layer_idx=layers.start,
            allow_is_causal_skip=allow_skip,
        )
        rotary = decoder.rotary_emb(hidden, position_ids=positions)
        for index in layers:
            if index in keep:
                kept[index] = hidden
            hidden = decoder.layers[index](
                hidden,
                attention_mask=mask,
                position_embeddings=rotary,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            )
    if layers.stop in keep:
        kept[layers.stop] = hidden
    return hidden, kept
