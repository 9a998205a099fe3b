"""The stack's walk attends with grouped key/value heads read in place (access.attention): the same bits as the
model's own sdpa attention, which repeats them, on every subject with grouped heads, and the model keeps its own
implementation."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.integrations import sdpa_attention

from access import attention
from access.stack import Stack
from core.chat import left_pad
from tests.support.padded_passes import SUBJECTS, padded_pass, subject_dir

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _top(stack: Stack, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        hidden, _ = stack.blocks(
            stack.embed(ids), range(stack.total), mask, positions, stack.new_cache(), allow_skip=False
        )
    return hidden


@pytest.mark.parametrize("subject", SUBJECTS)
def test_grouped_heads_give_the_bits_of_repeated_ones(subject, tiny_model_dir, chat_bases, chat_data, monkeypatch):
    """A padded prompt pass through every block: the stack's grouped attention equals transformers' sdpa (which
    repeats the key/value heads) bit for bit, it repeated none, and the model is left with sdpa."""
    stack, ids, mask = padded_pass(subject_dir(subject, tiny_model_dir, chat_bases), chat_data)
    config = stack.model.config
    assert config.num_key_value_heads < config.num_attention_heads, "the subject must group its heads"
    repeats: list[int] = []
    repeat_kv = sdpa_attention.repeat_kv
    monkeypatch.setattr(sdpa_attention, "repeat_kv", lambda x, n: (repeats.append(n), repeat_kv(x, n))[1])
    grouped = _top(stack, ids, mask)
    assert not repeats, "the stack's sdpa must read grouped heads in place"
    assert config._attn_implementation == "sdpa"

    monkeypatch.setattr(attention, "walk_name", lambda name: name)  # the model's own sdpa
    repeated = _top(stack, ids, mask)
    assert repeats, "transformers' sdpa repeats the heads under a mask"
    assert torch.equal(grouped, repeated)


@pytest.mark.parametrize("subject", SUBJECTS)
@pytest.mark.parametrize(
    ("lengths", "chunk_keys"),
    [((1000, 777, 600, 513), [512, 1000]), ((1025, 700), [512, 1025])],  # 1,025: no chunk of one query
)
def test_prompts_past_a_key_block_attend_in_chunks_with_the_same_bits(
    subject, lengths, chunk_keys, tiny_model_dir, chat_bases, chat_data, monkeypatch
):
    """Long prompts, left-padded: the stack's attention runs the first 512 queries over the first 512 keys only (the
    rest over all), and every block's output equals transformers' sdpa over all keys bit for bit."""
    stack, ids, mask = padded_pass(subject_dir(subject, tiny_model_dir, chat_bases), chat_data)
    tokens = ids[mask.bool()].tolist()
    ids, mask = left_pad([(tokens * (length // len(tokens) + 1))[:length] for length in lengths], pad_id=0)
    keys: list[int] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counted(query: torch.Tensor, key: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        keys.append(key.shape[2])
        return sdpa(query, key, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counted)
    chunked = _top(stack, ids, mask)
    assert sorted(set(keys)) == chunk_keys

    monkeypatch.setattr(attention, "walk_name", lambda name: name)  # the model's own sdpa, one call over every key
    keys.clear()
    whole = _top(stack, ids, mask)
    assert set(keys) == {max(lengths)}
    assert torch.equal(chunked[mask.bool()], whole[mask.bool()])


def test_an_eager_model_walks_with_its_own_attention(tiny_model_dir):
    """A model loaded with eager attention is not switched to sdpa by the walk."""
    from transformers.models.llama import modeling_llama

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="eager")
    calls: list[int] = []
    eager = modeling_llama.eager_attention_forward
    stack = Stack(model.eval())
    ids, mask = torch.tensor([[0, 5, 6, 7], [8, 9, 10, 11]]), torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    try:
        modeling_llama.eager_attention_forward = lambda *a, **k: (calls.append(1), eager(*a, **k))[1]
        _top(stack, ids, mask)
    finally:
        modeling_llama.eager_attention_forward = eager
    assert len(calls) == stack.total
    assert model.config._attn_implementation == "eager"
