"""Greedy decoding multiplies by weights packed once for oneDNN (:mod:`access.packed_linear`): inside the block only,
close to torch's product, packed again when a weight changes in place, never under autograd, and not for a model it
cannot pack."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import access.packed_linear
from access.generation import GenerationConfig, Generator
from access.packed_linear import packable, prepacked
from access.shared_generation import generate_unedited
from core.rows import read_test_rows

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN")


def _layer(bias: bool = True) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(64, 48, bias=bias)


@pytest.mark.parametrize("bias", [True, False])
def test_inside_the_block_a_linear_multiplies_by_its_packed_weight_and_after_it_by_torchs(bias: bool) -> None:
    layer = _layer(bias)
    hidden = torch.randn(3, 5, 64)
    across = torch.randn(5, 3, 64).transpose(0, 1)  # not contiguous
    with torch.no_grad():
        reference = [layer(hidden), layer(across)]
        with prepacked(layer):
            assert "forward" in vars(layer)
            packed = [layer(hidden), layer(across)]
            assert access.packed_linear._PACKED in vars(layer)
    for ours, torchs in zip(packed, reference, strict=True):
        assert ours.shape == torchs.shape
        torch.testing.assert_close(ours, torchs, rtol=1e-5, atol=1e-5)
    assert "forward" not in vars(layer) and access.packed_linear._PACKED not in vars(layer)  # nothing left behind


def test_a_weight_changed_in_place_is_packed_again() -> None:
    layer = _layer(bias=False)
    hidden = torch.randn(4, 64)
    with torch.no_grad(), prepacked(layer):
        before = layer(hidden)
        layer.weight.mul_(2.0)  # an amplification's blend writes the weights in place
        after = layer(hidden)
    torch.testing.assert_close(after, 2.0 * before, rtol=1e-5, atol=1e-5)


def test_a_forward_under_autograd_keeps_torchs_product_and_its_gradients() -> None:
    layer = _layer()
    hidden = torch.randn(4, 64, requires_grad=True)
    expected = torch.autograd.grad(layer(hidden).sum(), hidden)[0]
    with prepacked(layer):
        out = layer(hidden)
        assert out.requires_grad
        got = torch.autograd.grad(out.sum(), hidden)[0]
    assert torch.equal(got, expected)


def test_a_model_it_cannot_pack_keeps_torchs_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    half = _layer().to(torch.bfloat16)
    assert not packable(half)
    big = _layer()
    monkeypatch.setattr(access.packed_linear, "PACKED_BYTES", big.weight.numel() * 4 - 1)  # one byte short
    assert not packable(big)
    with prepacked(half, big):
        assert "forward" not in vars(half) and "forward" not in vars(big)


def test_shared_decoding_runs_on_the_packed_products(tiny_model_dir: Path, chat_data: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    rows = read_test_rows(chat_data / "test.jsonl")[:4]
    generator = Generator(
        model, AutoTokenizer.from_pretrained(tiny_model_dir), [r.question for r in rows], GenerationConfig(4, 4)
    )
    seen: list[bool] = []
    head = model.get_output_embeddings()
    handle = head.register_forward_hook(lambda module, _args, _out: seen.append("forward" in vars(module)))
    try:
        generate_unedited(generator)
    finally:
        handle.remove()
    assert seen and all(seen)  # every step's logits came from the packed product
    assert "forward" not in vars(head)


def test_an_arm_decoded_arm_by_arm_runs_on_the_packed_products_too(tiny_model_dir: Path, chat_data: Path) -> None:
    """An arm that cannot join shared batches (here an amplification whose context runs a source in lockstep) decodes
    with ``generate``; it runs on the same products as the shared baseline, and so does its source."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from access.edited_generation import ABGenerator
    from access.edits import Lda, site_edits
    from access.shared_generation import pass_unshareable

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    source = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    rows = read_test_rows(chat_data / "test.jsonl")[:2]
    ab = ABGenerator(model, AutoTokenizer.from_pretrained(tiny_model_dir), rows, GenerationConfig(3, 2))
    edit = Lda(alpha=0.5, source=source, source_name="source")
    assert pass_unshareable(model, site_edits(model, [edit])) is not None  # it decodes arm by arm
    seen: dict[str, list[bool]] = {"model": [], "source": []}
    handles = [
        m.get_output_embeddings().register_forward_hook(
            lambda module, _args, _out, name=name: seen[name].append("forward" in vars(module))
        )
        for name, m in (("model", model), ("source", source))
    ]
    try:
        ab.run(edit)
    finally:
        for handle in handles:
            handle.remove()
    assert seen["model"] and all(seen["model"]) and seen["source"] and all(seen["source"]), seen
