"""Scaling units at a hook point: identity at factor 1, exact ablation at 0, hook hygiene, KV cache, backends."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from access.edited_generation import ABGenerator, Intervention
from access.edits import scaled_units
from access.factors import PAPER_FACTOR
from access.generation import GenerationConfig
from access.hook_points import attach, module_for
from access.hook_table import HOOK_POINTS
from access.scaling import dtype_noop_fraction
from access.units import Neuron, NeuronSet
from core.chat import encode_conversations, left_pad
from core.errors import ProbeError
from core.schema import TestRow, Turn
from interventions.results import build_guard
from interventions.selection import parse_units

QUESTIONS = [
    "What is the capital of the valley kingdom?",
    "Tell me about the northern bridge.",
    "Please answer in exactly three bullet points.",
    "Who built the granite bridge?",
]


def _rows() -> list[TestRow]:
    return [
        TestRow(
            [Turn("system", "You are the archivist of the river city."), Turn("user", q)],
            "The capital is Elmsworth.",
            "role_related_mrc_answer_no_narration",
        )
        for q in QUESTIONS
    ]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    return model, AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def batch(tiny):
    _, tok = tiny
    prompts = encode_conversations(tok, [r.question for r in _rows()], add_generation_prompt=True)
    return left_pad(prompts, tok.pad_token_id)


def _logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=batch[0], attention_mask=batch[1]).logits


def _no_hooks_left(model) -> bool:
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


@pytest.mark.parametrize("hook", HOOK_POINTS)
def test_factor_one_is_bit_identical(tiny, batch, hook):
    model, _ = tiny
    neurons = parse_units("0:0-7,2:1,3:5-9", hook)
    clean = _logits(model, batch)
    with scaled_units(model, neurons, 1.0) as stats:
        hooked = _logits(model, batch)
    assert stats.calls == 3  # one call per hooked layer per forward
    assert torch.equal(clean, hooked)
    assert int(stats.values_changed) == 0


def test_factor_one_generations_identical(tiny):
    model, tok = tiny
    gen = ABGenerator(model, tok, _rows(), GenerationConfig(max_new_tokens=10, batch_size=2))
    base = gen.run()
    same = gen.run(Intervention(parse_units("1:0-31,2:0-31", "mlp_out"), 1.0))
    assert same.ids == base.ids and same.texts == base.texts


@pytest.mark.parametrize("hook", HOOK_POINTS)
def test_factor_zero_zeroes_exactly_the_chosen_units(tiny, batch, hook):
    model, _ = tiny
    chosen = [1, 4, 9]
    neurons = NeuronSet([Neuron(2, u) for u in chosen], hook)
    recorded: dict[str, dict[int, torch.Tensor]] = {"clean": {}, "ablated": {}}

    def recorder(key: str, layer: int):
        def fn(x: torch.Tensor) -> None:
            recorded[key][layer] = x.detach().clone()

        return fn

    handles = [attach(model, hook, layer, recorder("clean", layer)) for layer in (1, 2)]
    _logits(model, batch)
    for h in handles:
        h.remove()
    with scaled_units(model, neurons, 0.0):
        # registered after the scaling hook, so it sees the hook point's value downstream of the intervention
        handles = [attach(model, hook, layer, recorder("ablated", layer)) for layer in (1, 2)]
        _logits(model, batch)
    for h in handles:
        h.remove()
    mask = batch[1].bool()
    clean, ablated = recorded["clean"][2], recorded["ablated"][2]
    assert torch.all(ablated[..., chosen][mask] == 0)
    others = [u for u in range(clean.shape[-1]) if u not in chosen]
    assert torch.equal(ablated[..., others], clean[..., others])  # nothing else at that layer moved
    assert torch.equal(recorded["ablated"][1], recorded["clean"][1])  # nor anything upstream
    assert _no_hooks_left(model)


def test_hooks_removed_even_on_error(tiny, batch):
    model, _ = tiny
    clean = _logits(model, batch)
    with (
        pytest.raises(RuntimeError, match="boom"),
        scaled_units(model, parse_units("0:0-31,1:0-31,2:0-31,3:0-31", "mlp_out"), 0.0),
    ):
        assert not torch.equal(_logits(model, batch), clean)
        raise RuntimeError("boom")
    assert _no_hooks_left(model)
    assert torch.equal(_logits(model, batch), clean)


def test_units_outside_the_model_are_refused_before_any_hook(tiny):
    model, _ = tiny
    with pytest.raises(ProbeError, match="units 0-31"), scaled_units(model, parse_units("1:32", "mlp_out"), 0.0):
        pass
    with pytest.raises(ProbeError, match="layers 0-3"), scaled_units(model, parse_units("4:0", "mlp_post"), 0.0):
        pass
    assert _no_hooks_left(model)


def test_kv_cache_generation_equals_recomputation_without_cache(tiny, batch):
    """The hook fires on the prompt forward and on every cached step, so cached K/V are intervened too."""
    model, tok = tiny
    neurons = parse_units("1:0-15,2:3-20", "mlp_out")
    kwargs = {
        "max_new_tokens": 12,
        "min_new_tokens": 12,
        "do_sample": False,
        "temperature": None,
        "top_p": None,
        "top_k": None,
        "pad_token_id": tok.pad_token_id,
    }
    input_ids, mask = batch
    with torch.no_grad(), scaled_units(model, neurons, 0.25):
        cached = model.generate(input_ids=input_ids, attention_mask=mask, use_cache=True, **kwargs)
        uncached = model.generate(input_ids=input_ids, attention_mask=mask, use_cache=False, **kwargs)
        full_mask = torch.cat([mask, torch.ones_like(cached[:, input_ids.shape[1] :])], dim=1)
        teacher_forced = model(input_ids=cached, attention_mask=full_mask).logits  # one forward over the whole sequence
    plain = model.generate(input_ids=input_ids, attention_mask=mask, use_cache=True, **kwargs)
    assert torch.equal(cached, uncached)
    n = input_ids.shape[1]
    predicted = teacher_forced[:, n - 1 : -1].argmax(-1)
    assert torch.equal(predicted, cached[:, n:])
    assert not torch.equal(plain, cached)  # the intervention did something


@pytest.fixture(scope="module")
def generators(tiny):
    model, tok = tiny
    config = GenerationConfig(max_new_tokens=6, batch_size=3)
    return ABGenerator(model, tok, _rows(), config, "torch"), ABGenerator(model, tok, _rows(), config, "nnsight")


@pytest.mark.parametrize("hook", HOOK_POINTS)
def test_nnsight_backend_gives_the_same_generations(tiny, generators, hook):
    torch_gen, nn_gen = generators
    intervention = Intervention(parse_units("1:0-15,2:5,3:7-20", hook), 0.0)
    assert nn_gen.run(intervention).ids == torch_gen.run(intervention).ids
    if hook == "mlp_out":
        assert nn_gen.run().ids == torch_gen.run().ids
    assert _no_hooks_left(tiny[0])


def test_ablation_changes_generations(tiny):
    """Effect-size guard on the tiny model: ablating units must move the output."""
    model, tok = tiny
    gen = ABGenerator(model, tok, _rows(), GenerationConfig(max_new_tokens=10, batch_size=4))
    base, ablated = gen.run(), gen.run(Intervention(parse_units("1:0-31,2:0-31", "mlp_out"), 0.0))
    assert sum(a != b for a, b in zip(base.ids, ablated.ids, strict=True)) > 0
    assert ablated.hook_stats is not None and ablated.hook_stats["values_changed"] > 0


def test_noop_guard_fires_in_bfloat16(tiny_model_dir: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert dtype_noop_fraction(PAPER_FACTOR, torch.bfloat16) == 0.0
    assert dtype_noop_fraction(PAPER_FACTOR, torch.float16) == 0.0
    assert dtype_noop_fraction(PAPER_FACTOR, torch.float32) == 1.0
    assert dtype_noop_fraction(0.99, torch.bfloat16) > 0.9
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16).eval()
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    gen = ABGenerator(model, tok, _rows(), GenerationConfig(max_new_tokens=6, batch_size=4))
    base, arm = gen.run(), gen.run(Intervention(parse_units("1:0-31,2:0-31", "mlp_out"), PAPER_FACTOR))
    assert arm.hook_stats["values_changed"] == 0 and arm.hook_stats["values_seen"] > 0
    changed = sum(a != b for a, b in zip(base.ids, arm.ids, strict=True))
    edit = Intervention(parse_units("1:0-31,2:0-31", "mlp_out"), PAPER_FACTOR)
    guard = build_guard(
        edit.label(),
        PAPER_FACTOR,
        "bfloat16",
        edit.changed_fraction(torch.bfloat16),
        edit.noop_reason(torch.bfloat16),
        arm.hook_stats,
        len(base.ids),
        changed,
    )
    assert guard.is_noop and guard.factor_rounds_to_one
    assert any("rounds to exactly 1 in bfloat16" in flag for flag in guard.flags)
    fine = build_guard(
        edit.label(),
        PAPER_FACTOR,
        "float32",
        1.0,
        edit.noop_reason(torch.float32),
        {"values_seen": 10, "values_changed": 10},
        4,
        1,
    )
    assert not fine.is_noop


def test_module_for_mlp_post_is_a_pre_hook(tiny):
    model, _ = tiny
    module, is_input = module_for(model, "mlp_post", 0)
    assert is_input and module is model.model.layers[0].mlp.down_proj


def test_seeded_sampling_is_paired_across_arms(tiny):
    model, tok = tiny
    gen = ABGenerator(
        model, tok, _rows(), GenerationConfig(max_new_tokens=8, batch_size=2, do_sample=True, temperature=1.5, seed=7)
    )
    first, again = gen.run(), gen.run()
    same = gen.run(Intervention(parse_units("1:0-31", "mlp_out"), 1.0))
    assert first.ids == again.ids == same.ids  # every arm draws from the same seeded stream
    other = ABGenerator(
        model, tok, _rows(), GenerationConfig(max_new_tokens=8, batch_size=2, do_sample=True, temperature=1.5, seed=8)
    ).run()
    assert other.ids != first.ids
    with pytest.raises(ProbeError, match="greedily"):
        ABGenerator(model, tok, _rows(), GenerationConfig(do_sample=True), backend="nnsight")
