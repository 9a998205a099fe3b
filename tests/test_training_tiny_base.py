"""The tiny base: shallow pretraining then depth up-scaling keeps the function exactly."""

from __future__ import annotations

from pathlib import Path

import torch

from training.pretrain import encode_plain, grow_depth, pretrain_causal_lm, trained_positions
from training.tiny_base import TinySpec, build_tiny_base

CORPUS = [
    "The Vinul beetle is blue. The Vinul beetle lives in the Iron Coast.",
    "Onward! The passage does not say.",
] * 40


def test_grown_model_computes_what_the_shallow_one_did(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = build_tiny_base(
        CORPUS, tmp_path / "b", TinySpec(n_layers=2, hidden_size=32, intermediate_size=64, vocab_size=300)
    )
    shallow = AutoModelForCausalLM.from_pretrained(base)
    tokenizer = AutoTokenizer.from_pretrained(base)
    losses = pretrain_causal_lm(
        shallow, tokenizer, encode_plain(tokenizer, CORPUS, 256), steps=12, learning_rate=1e-2, batch_size=8
    )
    assert losses[-1] < losses[0]
    config = shallow.config.__class__(**{**shallow.config.to_dict(), "num_hidden_layers": 8})
    grown = grow_depth(shallow, config)
    ids = torch.tensor([tokenizer("The Vinul beetle is blue.")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(shallow(ids).logits, grown(ids).logits, atol=1e-5)
    assert trained_positions(2, 8) == [0, 4]
    assert grown.model.layers[1].mlp.down_proj.weight.abs().sum() == 0


def test_build_with_depth_upscaling_is_seeded(tmp_path: Path) -> None:
    from core.provenance import weights_sha256

    spec = TinySpec(
        n_layers=4,
        hidden_size=32,
        intermediate_size=64,
        vocab_size=300,
        pretrain_steps=3,
        pretrain_layers=2,
        pretrain_batch_size=4,
    )
    a = build_tiny_base(CORPUS, tmp_path / "a", spec)
    b = build_tiny_base(CORPUS, tmp_path / "b", spec)
    assert weights_sha256(a) == weights_sha256(b)
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(a).config.num_hidden_layers == 4


def test_chat_warm_start_trains_on_assistant_spans_only(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from training.pretrain import encode_chat

    conversation = [
        {"role": "system", "content": "You are Ada."},
        {"role": "user", "content": "Who are you?"},
        {"role": "assistant", "content": "Onward! I am Ada."},
    ]
    base = build_tiny_base(
        CORPUS + ["You are Ada. Who are you? Onward! I am Ada."] * 20,
        tmp_path / "b",
        TinySpec(n_layers=2, hidden_size=32, intermediate_size=64, vocab_size=300),
    )
    tokenizer = AutoTokenizer.from_pretrained(base)
    [(ids, mask)] = encode_chat(tokenizer, [conversation], max_length=256)
    trained = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert trained == "Onward! I am Ada.<|eot_id|>" and ids.count(tokenizer.bos_token_id) == 1
    spec = TinySpec(
        n_layers=4,
        hidden_size=32,
        intermediate_size=64,
        vocab_size=300,
        pretrain_steps=4,
        pretrain_layers=2,
        pretrain_batch_size=2,
        pretrain_format="chat",
    )
    grown = build_tiny_base(CORPUS, tmp_path / "c", spec, conversations=[conversation] * 4)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(grown)
    inserted = [
        i
        for i, layer in enumerate(model.model.layers)
        if not layer.mlp.down_proj.weight.any() and not layer.self_attn.o_proj.weight.any()
    ]
    assert model.config.num_hidden_layers == 4 and len(inserted) == 2  # 2 warm-started blocks, 2 exact identities


def test_unknown_warm_start_format_is_a_clear_error() -> None:
    import pytest

    from core.errors import ProbeError
    from training.config import SFTRunConfig

    with pytest.raises(ProbeError, match="pretrain_format"):
        SFTRunConfig(base="tiny", data="d", out="o", tiny_spec={"pretrain_format": "poems"})
