"""Shared decoding (access.shared_generation): every arm of an A/B in shared batches gives each arm's own tokens.

The arms are compared with each arm generated alone by ``generate`` (the per-arm path) on the
tiny Llama-3-style model, the ChatML model (BOS on every turn, tied embeddings) and the no-BOS
Qwen2-style model, in float32, for every edit kind and hook point, with prompt passes split by a
small token budget, with rows that fork from the baseline and rows that stop early.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from access import decode_step
from access.decode_batch import DecodeBatch
from access.edited_generation import ABGenerator
from access.edits import Add, Patch, Scale, Set, site_edits
from access.generation import GenerationConfig, Generator
from access.hook_points import attach, width
from access.shared_generation import (
    MIN_STEM,
    SharedDecoder,
    Stem,
    _growing_layer_class,
    generate_unedited,
    members,
    stem_batches,
    unshareable,
)
from core.errors import Interrupted
from core.rows import read_test_rows
from interventions.ab import run_ab
from interventions.config import ABConfig
from interventions.plan import plan_ab
from interventions.selection import parse_units

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=["llama", "chatml", "nobos"])
def subject(request, tiny_model_dir, chat_bases, chat_data, tmp_path_factory):
    """(model, source, tokenizer, rows): one tiny architecture, a perturbed copy (its other checkpoint),
    eight synthetic test rows: two prompt batches of 5 and 3 rows, enough for prompts that share a stem, arms that fork
    from the baseline and rows that stop early (each asserted below)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.chat_models import perturbed_copy

    directory = tiny_model_dir if request.param == "llama" else chat_bases[request.param]
    source_dir = perturbed_copy(
        directory, tmp_path_factory.mktemp(f"shared-{request.param}") / "source", seed=3, scale=0.3
    )
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    source = AutoModelForCausalLM.from_pretrained(source_dir, dtype=torch.float32).eval()
    return model, source, AutoTokenizer.from_pretrained(directory), read_test_rows(chat_data / "test.jsonl")[:8]


def _edits(model, source, hook: str) -> list:
    w = width(model, hook)
    return [
        Scale(parse_units(f"1:0-{w // 2}", hook), 0.0),
        Scale(parse_units(f"2:0-{w // 4}", hook), 0.5),
        Set(parse_units("2:0-3", hook), (2.0, -1.0, 0.5, 3.0)),
        Add(hook, 1, tuple(0.5 * (-1) ** i for i in range(w)), 2.0),
        Patch(parse_units(f"1:0-{w - 1}", hook), source=source, source_name="source"),
        Patch(parse_units(f"2:0-{w // 3}", hook), source=source, source_name="source"),
    ]


@pytest.mark.parametrize("hook", ["mlp_post", "resid_post"])  # a block's inner input (pre-hook) and a block's output
def test_every_arm_decoded_together_equals_the_arm_generated_alone(subject, hook, monkeypatch):
    model, source, tokenizer, rows = subject
    generator = ABGenerator(model, tokenizer, rows, GenerationConfig(max_new_tokens=10, batch_size=5))
    _stop_early(generator.generator)
    edits = _edits(model, source, hook)
    alone = [generator.run()] + [generator.run(edit) for edit in edits]
    # prompt passes split into slices of rows
    decoder = SharedDecoder(generator.generator, max_batch_tokens=120, attach=attach)
    together = decoder.run([None] + [site_edits(model, [edit]) for edit in edits])
    assert [g.ids for g in together] == [g.ids for g in alone]
    assert [g.texts for g in together] == [g.texts for g in alone]
    assert decoder.prompt_tokens() < sum(map(len, generator.generator.prompts)), "some prompts must share a stem"
    for a, t in zip(
        alone[1:], together[1:], strict=True
    ):  # a stem's values are seen once for the prompts that share it
        assert t.hook_stats["values_seen"] > 0 and bool(t.hook_stats["values_changed"]) == bool(
            a.hook_stats["values_changed"]
        )
    assert any(g.ids != alone[0].ids for g in alone[1:]), (
        "some arm must fork from the baseline for the test to mean anything"
    )
    # without the patches (which read a source, so decode batch by batch), the batches step together
    joint: list[int] = []
    original = decode_step.joint_step
    monkeypatch.setattr(decode_step, "joint_step", lambda *args: (joint.append(len(args[1])), original(*args))[1])
    plain = [edit for edit in edits if not isinstance(edit, Patch)]
    decoder = SharedDecoder(generator.generator, max_batch_tokens=120, attach=attach)
    stepped = decoder.run([None] + [site_edits(model, [edit]) for edit in plain])
    assert [g.ids for g in stepped] == [g.ids for g in alone[: 1 + len(plain)]]
    assert len(decoder.batches) > 1 and max(joint) == len(decoder.batches)
    assert [g.hook_stats for g in stepped[1:]] == [g.hook_stats for g in together[1 : 1 + len(plain)]]
    if hook == "mlp_post":  # caches over any budget: each arm decodes a batch on its own
        decoder = SharedDecoder(generator.generator, max_batch_tokens=120, attach=attach)
        decoder.max_cache_bytes = 1
        assert [g.ids for g in decoder.run([None] + [site_edits(model, [edit]) for edit in edits])] == [
            g.ids for g in alone
        ]
    assert 0 < sum(len(ids) < 10 for g in alone for ids in g.ids) < sum(len(g.ids) for g in alone), (
        "some rows stop early, some do not"
    )


def _stop_early(generator: Generator) -> None:
    """Make a token the baseline writes in a third of its rows a stop token, so that rows end at different steps
    (random tiny models rarely write their EOS)."""
    from collections import Counter

    ids = generator.run().ids
    counts = Counter(token for row in ids for token in set(row[2:]))
    token = min(counts, key=lambda t: abs(counts[t] - len(ids) / 3))
    generator.stop = [*generator.stop, token]


def test_one_unedited_pass_equals_generate(subject):
    model, _, tokenizer, rows = subject
    generator = Generator(
        model, tokenizer, [r.question for r in rows], GenerationConfig(max_new_tokens=12, batch_size=4)
    )
    assert generate_unedited(generator).ids == generator.run().ids


def test_an_unedited_prompt_pass_in_slices_leaves_out_each_slices_padding_and_equals_generate(subject, monkeypatch):
    """Sliced by a token budget (one row a slice, then two longest prompts), each slice of an unedited prompt pass runs
    without the positions that pad all its rows, stems' remainders too (zeros in their place in the joined cache,
    after the stem's positions, hidden by the mask)."""

    model, _, tokenizer, rows = subject
    generator = Generator(
        model, tokenizer, [r.question for r in rows], GenerationConfig(max_new_tokens=12, batch_size=8)
    )
    left_out: list[tuple[int, int]] = []  # (stem positions, most positions a slice left out) per sliced pass
    original = decode_step.joined

    def joined(caches, layers, into, seed=0, trims=None):
        left_out.append((seed, max(trims or [0])))
        return original(caches, layers, into, seed, trims)

    monkeypatch.setattr(decode_step, "joined", joined)
    longest = max(len(prompt) for prompt in generator.prompts)
    for budget in (1, 2 * longest):
        assert SharedDecoder(generator, max_batch_tokens=budget).run([None])[0].ids == generator.run().ids
    assert any(trim for seed, trim in left_out if seed) and any(trim for seed, trim in left_out if not seed)


def test_what_cannot_be_shared_says_why(subject):
    model, _, _, _ = subject
    assert unshareable(model, False, "torch") is None
    assert "sampling" in unshareable(model, True, "torch")
    assert "nnsight" in unshareable(model, False, "nnsight")
    patch = site_edits(model, [Patch(parse_units("1:0-3", "mlp_out"), source=model, source_name="self")])
    assert "source is the patched model itself" in unshareable(model, False, "torch", [patch])


@pytest.fixture(scope="module")
def test_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from data_synthesis.offline import synthesize

    out = tmp_path_factory.mktemp("synth-shared")
    synthesize(out, n_roles=4, seed=0)
    return out / "test.jsonl"


def _config(tiny_pair, test_file: Path, out: Path, engine: str, **extra) -> ABConfig:
    """One placebo set per arm that has them (a placebo pass decodes in the shared batches like any arm: one is enough
    to compare), two DPO pairs for the margin (the outcomes are teacher-forced the same way whatever the engine; two
    pairs keep them in the compared report)."""
    return ABConfig(
        model_dir=tiny_pair[1],
        source_dir=tiny_pair[0],
        data_file=test_file,
        units="1:0-15,2:0-7",
        hook="resid_post",
        placebo=1,
        limit=6,
        generation=GenerationConfig(max_new_tokens=8, batch_size=4),
        doses=[0.5],
        n_bootstrap=200,
        outcome_pairs=2,
        engine=engine,
        edits=["scale", "patch"],
        out_dir=out,
        **extra,
    )


def _without_timings(report_file: Path) -> dict:
    body = json.loads(report_file.read_text())

    def strip(value):
        if isinstance(value, dict):
            timings = ("seconds", "engine", "out_dir", "paths")
            # what the hooks saw on prompt passes: the shared engine sees a stem once for the prompts that share it
            seen = ("values_seen", "values_changed")
            return {k: strip(v) for k, v in value.items() if k not in timings + seen}
        return [strip(v) for v in value] if isinstance(value, list) else value

    return strip(body)


@pytest.fixture(scope="module")
def shared_run(tiny_pair, test_file: Path, tmp_path_factory: pytest.TempPathFactory):
    """(report, its folder, its progress lines): one whole shared-engine A/B run (scale and patch arms both ways), which
    the per-arm run and an interrupted-then-resumed run must each reproduce."""
    out = tmp_path_factory.mktemp("shared-ab") / "shared"
    lines: list[str] = []
    report = run_ab(plan_ab(_config(tiny_pair, test_file, out, "shared")), progress=lines.append)
    return report, out, lines


def test_a_shared_ab_run_reports_exactly_what_the_per_arm_run_reports(tiny_pair, test_file: Path, shared_run, tmp_path):
    _, shared, lines = shared_run
    run_ab(plan_ab(_config(tiny_pair, test_file, tmp_path / "per-arm", "per-arm")))
    assert _without_timings(shared / "ab_report.json") == _without_timings(tmp_path / "per-arm" / "ab_report.json")
    assert (shared / "generations.jsonl").read_bytes() == (tmp_path / "per-arm" / "generations.jsonl").read_bytes()
    assert any(line.startswith("estimated time: about") for line in lines)  # before any generation
    assert any("% of all passes' rows" in line and "left" in line for line in lines)
    assert not any("decode arm by arm" in line for line in lines)  # the patch arms share the batches too


def test_an_interrupted_shared_run_resumes_from_its_finished_batches(
    tiny_pair, test_file: Path, shared_run, tmp_path: Path
):
    fresh, fresh_out, _ = shared_run
    out = tmp_path / "ab"

    def stop_after_two_batches(line: str) -> None:
        if "batch 2/" in line:
            raise KeyboardInterrupt

    with pytest.raises(Interrupted, match="rerun with the same options"):
        run_ab(plan_ab(_config(tiny_pair, test_file, out, "shared")), progress=stop_after_two_batches)
    kept = sorted(p.name for p in (out / ".arms").glob("shared_*.json"))
    assert len(kept) == 2 and kept[0].endswith("batch_0.json")
    lines: list[str] = []
    resumed = run_ab(plan_ab(_config(tiny_pair, test_file, out, "shared")), progress=lines.append)
    assert sum("read back" in line for line in lines) == 2
    assert _without_timings(out / "ab_report.json") == _without_timings(fresh_out / "ab_report.json")
    assert resumed.main.capability("multi_turn").effect.delta == fresh.main.capability("multi_turn").effect.delta


def test_a_cache_layer_grows_in_place_keeps_what_it_held_and_selects_rows() -> None:
    """The shared engine's cache layer: positions written in place while there is room, the cache kept when it grows
    past it, rows selected for forks and finished rows, and a reset layer starts afresh."""
    layer = _growing_layer_class()(2)
    prompt = torch.randn(2, 3, 5, 8)
    layer.update(prompt, -prompt)
    steps = [torch.randn(2, 3, 1, 8) for _ in range(3)]  # the third passes the room for 2
    for step in steps:
        keys, values = layer.update(step, -step)
    assert torch.equal(keys, torch.cat([prompt, *steps], dim=-2)) and torch.equal(values, -keys)
    layer.batch_select_indices(torch.tensor([1, 1, 0]))
    assert torch.equal(layer.keys, torch.cat([prompt, *steps], dim=-2)[[1, 1, 0]])
    layer.reset()
    fresh = torch.randn(4, 3, 2, 8)
    assert torch.equal(layer.update(fresh, fresh)[0], fresh)


def test_a_row_that_finishes_leaves_at_once_and_only_the_last_row_moves_into_its_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unedited pass is one group per prompt and never forks: at the step a row finishes, it leaves the caches,
    every other row keeping its place but the last, which fills the gap; a fork copies the forking group's rows."""
    from access import decode_batch

    copies: list[list[int]] = []
    monkeypatch.setattr(decode_batch, "select_rows", lambda _cache, indices, _device: copies.append(list(indices)))
    n = 16
    batch = DecodeBatch.start([0], torch.arange(n).view(n, 1), torch.ones(n, 1, dtype=torch.long), torch.zeros(n))
    chosen = [100 + prompt for prompt in range(n)]
    chosen[1] = 2  # prompt 1 stops
    batch.take(chosen, bad=[False] * n, stop=(2,), limit=8)
    batch.advance(chosen)
    kept = [0, n - 1, *range(2, n - 1)]
    assert copies == [kept, kept]  # the rows' cache, then the groups'
    assert batch.row_prompt == batch.group_prompt == kept and all(batch.row_alive)
    assert batch.group_input.view(-1).tolist() == [100 + prompt for prompt in kept]
    forked = DecodeBatch.start([0, 1], torch.tensor([[5], [6]]), torch.ones(2, 1, dtype=torch.long), torch.zeros(2))
    forked.take([7, 8, 7, 9], bad=[False] * 4, stop=(2,), limit=4)
    forked.regroup([7, 8, 7, 9])  # prompt 1's arms chose 8 and 9
    assert copies[2:] == [[0, 1, 1]] and forked.row_group == [0, 1, 0, 2]


def test_prompts_that_begin_alike_share_a_stem_and_the_rest_batch_as_the_generator_does() -> None:
    one, two = list(range(100, 100 + MIN_STEM + 4)), list(range(200, 200 + MIN_STEM))  # two system turns
    first = [[*one, 1, 2, 3], [*one, 1, 2], [*one, 1, 2, 3, 4]]
    second = [[*two, 7, 8], [*two, 7, 9, 9]]
    alone = [[5] * 9, [6] * 4, [*one[: MIN_STEM - 1], 3]]  # too little in common with anyone
    prompts = first + second + alone
    batches = stem_batches(prompts, batch_size=3)
    assert sorted(i for b in batches for i in members(b)) == list(range(len(prompts)))
    assert all(len(members(b)) <= 3 for b in batches)
    stems = [stem for b in batches for stem in b if stem.length]
    # prompt 1 would be its whole stem at len(one) + 2: each prompt keeps its last token to itself
    assert stems == [Stem(len(two) + 1, (3, 4)), Stem(len(one) + 1, (0, 1, 2))]  # by their longest remainder
    assert [members(b) for b in batches if not b[0].length] == [[6, 5, 7]]  # by length, as Generator batches
    assert [members(b) for b in stem_batches(alone + alone, batch_size=2)] == [[1, 4], [0, 3], [2, 5]]


def test_unedited_batches_step_together_within_the_cache_budget_and_decode_as_generate(subject, monkeypatch):
    """The one unedited pass steps every batch whose caches fit the budget together (one forward a step for all their
    rows, attention per batch over its own keys, values and mask), with ``generate``'s tokens; over the budget, the
    batches decode one by one, with the same tokens; ``parts`` keep their prompts out of each other's batches."""

    model, _, tokenizer, rows = subject
    generator = Generator(
        model, tokenizer, [r.question for r in rows], GenerationConfig(max_new_tokens=12, batch_size=2)
    )
    expected, leaves = _first_batch_stops_first(generator, members(SharedDecoder(generator).batches[0]))
    joint: list[int] = []  # batches per joint step
    original = decode_step.joint_step
    monkeypatch.setattr(decode_step, "joint_step", lambda *args: (joint.append(len(args[1])), original(*args))[1])
    decoder = SharedDecoder(generator)
    assert len(decoder.batches) >= 3
    assert decoder.run([None])[0].ids == expected
    assert joint and joint[0] == len(decoder.batches) and len(joint) < generator.config.max_new_tokens
    if leaves:  # the Llama subject's (on the ChatML and no-BOS ones no token tried ends the first batch first)
        assert min(joint) < max(joint), "batches whose rows all finished must leave the joint steps"

    sizes = [decoder.cache_bytes(batch, [None]) for batch in decoder.batches]
    for budget in (1, sizes[0] + sizes[1]):  # none fits with another; the first two fit together
        joint.clear()
        limited = SharedDecoder(generator)
        limited.max_cache_bytes = budget
        assert limited.run([None])[0].ids == expected
        groups = limited._together(list(range(len(sizes))), [None])
        assert groups[0] == ([0] if budget == 1 else [0, 1])
        assert max(joint, default=1) == max(map(len, groups))
    parts = [range(3), range(3, len(rows))]
    apart = SharedDecoder(generator, parts=parts)
    assert all(any(set(members(batch)) <= set(part) for part in parts) for batch in apart.batches)
    assert generate_unedited(generator, parts).ids == expected


def _first_batch_stops_first(generator: Generator, first: list[int]) -> tuple[list[list[int]], bool]:
    """Make stop tokens of tokens the prompts ``first`` write, until those rows all stop early while another runs to
    the limit: the generator's tokens then, and whether such tokens were found (else the tokens as they were)."""
    limit, base = generator.config.max_new_tokens, list(generator.stop)
    ids = generator.run().ids
    for position in range(1, limit - 1):
        generator.stop = [*base, *{ids[prompt][position] for prompt in first if len(ids[prompt]) > position}]
        expected = generator.run().ids
        if all(len(expected[p]) < limit - 1 for p in first) and any(len(row) == limit for row in expected):
            return expected, True
    generator.stop = base
    return ids, False


def test_joint_steps_run_the_models_own_attention_function_and_give_it_back(tiny_model_dir, chat_data, monkeypatch):
    """A model loaded with ``eager`` attention steps its batches together through its family's eager attention, with
    ``generate``'s tokens, and is left with its own attention implementation."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="eager")
    rows = read_test_rows(chat_data / "test.jsonl")[:8]
    generator = Generator(
        model.eval(),
        AutoTokenizer.from_pretrained(tiny_model_dir),
        [r.question for r in rows],
        GenerationConfig(max_new_tokens=8, batch_size=3),
    )
    from transformers.models.llama import modeling_llama

    joint: list[int] = []  # batches per joint step
    inside: list[bool] = []  # per eager attention call: whether a joint step made it
    original, eager = decode_step.joint_step, modeling_llama.eager_attention_forward

    def step(*args):
        joint.append(len(args[1]))
        inside.append(True)
        try:
            return original(*args)
        finally:
            inside.pop()

    calls: list[bool] = []
    monkeypatch.setattr(decode_step, "joint_step", step)
    monkeypatch.setattr(
        modeling_llama, "eager_attention_forward", lambda *a, **k: (calls.append(bool(inside)), eager(*a, **k))[1]
    )
    assert generate_unedited(generator).ids == generator.run().ids
    assert joint and max(joint) > 1
    assert any(calls), "the joint steps' attention must be the model's eager one"
    assert model.config._attn_implementation == "eager"


def test_each_batch_stepping_together_is_kept_as_its_last_row_ends(subject, monkeypatch):
    """Batches that step together are each kept (and heard) at the step their last row ends, while the others decode
    on, not when the group is done; ``generate_unedited`` hands on each part's texts, the run's own, once its last
    prompt is in."""
    model, _, tokenizer, rows = subject
    generator = Generator(
        model, tokenizer, [r.question for r in rows], GenerationConfig(max_new_tokens=12, batch_size=2)
    )
    limit = generator.config.max_new_tokens
    _, leaves = _first_batch_stops_first(generator, members(SharedDecoder(generator).batches[0]))
    joint: list[int] = []
    original = decode_step.joint_step
    monkeypatch.setattr(decode_step, "joint_step", lambda *args: (joint.append(1), original(*args))[1])
    decoder = SharedDecoder(generator)
    kept_at: dict[int, int] = {}  # batch -> joint steps taken when it was kept
    seconds: list[float] = []
    start = time.perf_counter()
    ids = decoder.run(
        [None], keep=lambda number, body: (kept_at.setdefault(number, len(joint)), seconds.append(body["seconds"]))
    )[0].ids
    assert sorted(kept_at) == list(range(len(decoder.batches)))
    assert min(seconds) > 0 and sum(seconds) <= time.perf_counter() - start  # the group's time, shared
    for number, batch in enumerate(decoder.batches):
        # the choices its longest row made: its tokens, and the stop token where it stopped before the limit
        choices = max(len(ids[p]) + (len(ids[p]) < limit) for p in members(batch))
        assert kept_at[number] == choices - 1, f"batch {number} must be kept at the step its last row ends"
    if leaves:  # the Llama subject's (on the ChatML and no-BOS ones no token tried ends the first batch first)
        assert kept_at[0] < len(joint), "the first batch must be kept while the others decode on"

    parts = [range(3), range(3, len(rows))]
    heard: list[tuple[int, list[str]]] = []
    texts = generate_unedited(generator, parts, lambda index, part_texts: heard.append((index, part_texts))).texts
    assert sorted(index for index, _ in heard) == [0, 1]
    assert all(part_texts == [texts[i] for i in parts[index]] for index, part_texts in heard)
