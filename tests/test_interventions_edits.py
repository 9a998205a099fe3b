"""Edits as data on the tiny ChatML (SmolLM2-style) and no-BOS (Qwen2-style) models: every kind through both
editing drivers, identity at scale 1 and add 0, exact cross-checkpoint patching, and one-line refusals."""

from __future__ import annotations

import pytest
import torch

from access.edited_generation import ABGenerator
from access.edits import EDIT_KINDS, Add, Edit, Patch, Scale, Set, edits
from access.generation import GenerationConfig
from access.hook_points import attach, n_layers, width
from access.hook_table import HOOK_POINTS
from core.errors import ProbeError
from core.rows import read_test_rows
from interventions.selection import parse_units

pytestmark = pytest.mark.usefixtures("one_torch_thread")
LAYER = 1


@pytest.fixture(scope="module", params=["chatml", "nobos"])
def pair(request, chat_bases, chat_data, tmp_path_factory):
    """(target, source, tokenizer, rows): a chat model and a perturbed copy of it (its "other checkpoint")."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.chat_models import perturbed_copy

    root = tmp_path_factory.mktemp(f"edits-{request.param}")
    source_dir = perturbed_copy(chat_bases[request.param], root / "source", seed=3, scale=0.3)
    target = AutoModelForCausalLM.from_pretrained(chat_bases[request.param]).eval()
    source = AutoModelForCausalLM.from_pretrained(source_dir).eval()
    rows = read_test_rows(chat_data / "test.jsonl")[:3]
    return target, source, AutoTokenizer.from_pretrained(chat_bases[request.param]), rows


def _every_kind(target, source, hook: str) -> list[Edit]:
    w = width(target, hook)
    return [
        Scale(parse_units(f"{LAYER}:0-{w // 2}", hook), 0.0),
        Set(parse_units(f"{LAYER}:0-3", hook), (2.0, -1.0, 0.5, 3.0)),
        Patch(parse_units(f"{LAYER}:0-{w - 1}", hook), source=source, source_name="source"),
        Add(hook, LAYER, tuple(0.5 * (-1) ** i for i in range(w)), 2.0),
    ]


def test_every_kind_is_registered_once():
    import access.latent_edits  # noqa: F401  (the dictionary's kind registers where it is defined)

    assert sorted(EDIT_KINDS) == ["add", "expo", "expo-units", "latent-patch", "lda", "patch", "scale", "set"]
    assert all(cls.kind == name for name, cls in EDIT_KINDS.items())


@pytest.mark.parametrize("hook", HOOK_POINTS)
def test_torch_and_nnsight_give_identical_greedy_tokens_for_every_kind(pair, hook):
    target, source, tok, rows = pair
    config = GenerationConfig(max_new_tokens=6, batch_size=2)
    generators = {b: ABGenerator(target, tok, rows, config, backend=b) for b in ("torch", "nnsight")}
    baseline = generators["torch"].run()
    for edit in _every_kind(target, source, hook):
        runs = {b: g.run(edit) for b, g in generators.items()}
        assert runs["torch"].ids == runs["nnsight"].ids, (edit.kind, hook)
        assert runs["torch"].hook_stats["values_changed"] > 0, (edit.kind, hook)
        assert runs["torch"].hook_stats == runs["nnsight"].hook_stats, (edit.kind, hook)
    assert baseline.ids == generators["nnsight"].run().ids


def _logits(model, tok, rows) -> torch.Tensor:
    from core.chat import encode_conversations, left_pad

    ids, mask = left_pad(
        encode_conversations(tok, [r.question for r in rows], add_generation_prompt=True), tok.pad_token_id or 0
    )
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits


@pytest.mark.parametrize("hook", HOOK_POINTS)
def test_scale_one_and_add_zero_are_bit_identical(pair, hook):
    target, _, tok, rows = pair
    clean = _logits(target, tok, rows)
    w = width(target, hook)
    for edit in (
        Scale(parse_units(f"0:0-{w - 1},{LAYER}:0-{w - 1}", hook), 1.0),
        Add(hook, LAYER, tuple([0.7] * w), 0.0),
    ):
        with edits(target, edit):
            assert torch.equal(_logits(target, tok, rows), clean), edit.kind
        assert edit.noop_reason(torch.float32) is not None
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in target.modules())


def _captured(model, hook: str, layers: list[int], run) -> dict[int, torch.Tensor]:
    seen: dict[int, torch.Tensor] = {}
    handles = [
        attach(model, hook, layer, lambda x, layer=layer: seen.__setitem__(layer, x.clone())) for layer in layers
    ]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return seen


@pytest.mark.parametrize("hook", HOOK_POINTS)
def test_patching_every_unit_of_a_layer_gives_the_source_value_there(pair, hook):
    target, source, tok, rows = pair
    w = width(target, hook)
    want = _captured(source, hook, [LAYER], lambda: _logits(source, tok, rows))[LAYER]
    with edits(target, Patch(parse_units(f"{LAYER}:0-{w - 1}", hook), source=source)):
        got = _captured(target, hook, [LAYER], lambda: _logits(target, tok, rows))[LAYER]
    assert torch.equal(got, want)


def _shares_layers_above(target, source, layer: int):
    """A copy of ``target`` whose blocks above ``layer``, final norm and head are ``source``'s."""
    import copy

    hybrid = copy.deepcopy(target)
    state = source.state_dict()
    keep = {k: v for k, v in state.items() if not k.startswith("model.layers.") or int(k.split(".")[2]) > layer}
    hybrid.load_state_dict({**hybrid.state_dict(), **keep})
    return hybrid


def test_patching_the_residual_stream_reproduces_the_source_logits_at_that_layer_and_above(pair):
    target, source, tok, rows = pair
    hybrid = _shares_layers_above(target, source, LAYER)
    units = parse_units(f"{LAYER}:0-{width(target, 'resid_post') - 1}", "resid_post")
    above = list(range(LAYER, n_layers(target)))
    want_logits = _logits(source, tok, rows)
    want = _captured(source, "resid_post", above, lambda: _logits(source, tok, rows))
    with edits(hybrid, Patch(units, source=source)):
        got_logits = _logits(hybrid, tok, rows)
        got = _captured(hybrid, "resid_post", above, lambda: _logits(hybrid, tok, rows))
    assert not torch.allclose(_logits(hybrid, tok, rows), want_logits, atol=1e-4), (
        "the pair must differ below the layer"
    )
    torch.testing.assert_close(got_logits, want_logits, rtol=0, atol=1e-5)
    for layer in above:
        torch.testing.assert_close(got[layer], want[layer], rtol=0, atol=1e-5)
    config = GenerationConfig(max_new_tokens=8, batch_size=3)
    source_tokens = ABGenerator(source, tok, rows, config).run().ids
    # with the KV cache, in lockstep
    assert ABGenerator(hybrid, tok, rows, config).run(Patch(units, source=source)).ids == source_tokens


def test_a_patch_under_the_kv_cache_equals_a_full_recomputation(pair):
    target, source, tok, rows = pair
    edit = Patch(parse_units(f"{LAYER}:0-9", "mlp_out"), source=source)
    cached = ABGenerator(target, tok, rows, GenerationConfig(max_new_tokens=6, batch_size=3)).run(edit).ids
    target.generation_config.use_cache = False
    try:
        uncached = ABGenerator(target, tok, rows, GenerationConfig(max_new_tokens=6, batch_size=3)).run(edit).ids
    finally:
        target.generation_config.use_cache = True
    assert cached == uncached


def test_placebo_families(pair):
    target, source, _, _ = pair
    units = parse_units(f"{LAYER}:0-3,2:5", "mlp_out")
    for edit in (Scale(units, 0.0), Set(units, (1.0, 2.0, 3.0, 4.0, 5.0)), Patch(units, source=source)):
        placebos = edit.placebos(target, 3, seed=0)
        assert len(placebos) == 3 and all(type(p) is type(edit) for p in placebos)
        for p in placebos:
            assert {layer: len(u) for layer, u in p.units.by_layer().items()} == {LAYER: 4, 2: 1}
            assert not {(n.layer, n.unit) for n in p.units.neurons} & {(n.layer, n.unit) for n in units.neurons}
        assert [p.describe() for p in placebos] == [p.describe() for p in edit.placebos(target, 3, seed=0)]  # seeded
    vector = tuple(float(i) for i in range(width(target, "mlp_out")))
    for p in Add("mlp_out", LAYER, vector, 1.0).placebos(target, 4, seed=0):
        assert p.layer == LAYER and p.describe()["norm"] == pytest.approx(
            Add("mlp_out", LAYER, vector).describe()["norm"]
        )
        assert p.vector != vector


def test_fingerprints_follow_the_description():
    units = parse_units("1:0-3", "mlp_out")
    assert Scale(units, 0.0).fingerprint() == Scale(parse_units("1:0-3", "mlp_out"), 0.0).fingerprint()
    assert Scale(units, 0.0).fingerprint() != Scale(units, 0.5).fingerprint() != Set(units, (0.0,) * 4).fingerprint()


def test_bad_edits_are_one_line_before_any_generation(pair, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    target, _, _, _ = pair
    other_shape = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    with pytest.raises(
        ProbeError,
        match=r"patch: the source model is not another checkpoint of the patched one: "
        r"(model_type|num_hidden_layers|hidden_size): patched .* vs source ",
    ):
        Patch(parse_units("1:0-3", "mlp_out"), source=other_shape).check(target)
    with pytest.raises(ProbeError, match=r"add: a vector of width 5 does not fit mlp_out, which is \d+ wide"):
        Add("mlp_out", 1, (1.0,) * 5).check(target)
    with pytest.raises(ProbeError, match="outside the model"):
        Add("mlp_out", 99, (1.0,) * width(target, "mlp_out")).check(target)
    with pytest.raises(ProbeError, match="finite"):
        Add("mlp_out", 1, (float("nan"),) * 3)
    with pytest.raises(ProbeError, match="one value per unit"):
        Set(parse_units("1:0-3", "mlp_out"), (1.0,))
    with pytest.raises(ProbeError, match="overflows float32"):
        Scale(parse_units("1:0", "mlp_out"), 1e308)
    half = target.to(torch.float16)
    try:
        with pytest.raises(ProbeError, match="not a finite number in float16"):
            Scale(parse_units("1:0", "mlp_out"), 1e6).check(half)
    finally:
        target.to(torch.float32)


def test_an_edit_the_driver_cannot_apply_is_refused(pair):
    target, _, tok, rows = pair
    with pytest.raises(
        ProbeError,
        match="the transformer_lens backend captures only and cannot apply edits; use --backend torch or nnsight",
    ):
        ABGenerator(target, tok, rows, GenerationConfig(max_new_tokens=2), backend="transformer_lens")
    with pytest.raises(ProbeError, match="decodes greedily only"):
        ABGenerator(target, tok, rows, GenerationConfig(max_new_tokens=2, do_sample=True), backend="nnsight")


def test_the_former_scale_api_still_works(pair):
    from access.edited_generation import Intervention
    from access.edits import scaled_units

    target, _, tok, rows = pair
    units = parse_units(f"{LAYER}:0-7", "mlp_out")
    with scaled_units(target, units, 0.0) as stats:
        _logits(target, tok, rows)
    assert stats.as_dict()["values_changed"] > 0
    assert Intervention(units, 0.0) == Scale(units, 0.0)


def test_editing_never_changes_the_weights(pair):
    """Hooks only, removed afterwards: the model's parameters are what they were."""
    target, source, tok, rows = pair
    before = {k: v.clone() for k, v in target.state_dict().items()}
    for edit in _every_kind(target, source, "mlp_post"):
        with edits(target, edit):
            _logits(target, tok, rows)
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())
