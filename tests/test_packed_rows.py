"""A prompt pass packed to its real tokens (access.packed_rows) gives the padded pass's bits: its output, the keys and
values its cache keeps, and the next step's logits, on every subject; its blocks' products see no padding. Finished
rows leave a shared decode's caches by moving only the rows that must (access.decode_batch.settled)."""

from __future__ import annotations

import pytest
import torch

from access.decode_batch import DecodeBatch, settled
from access.kv_cache import new_cache, select_rows
from access.packed_linear import prepacked
from access.stack import Stack
from tests.support.padded_passes import SUBJECTS, padded_pass, subject_dir

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _pass_and_step(stack: Stack, ids: torch.Tensor, mask: torch.Tensor, packed: bool) -> dict[str, object]:
    """A prompt pass (``packed`` or not) and one decode step after it: the pass's output, its cache, the step's
    logits, and how many rows the first block's query product saw in the pass."""
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    rows_seen: list[int] = []
    q_proj = stack.decoder.layers[0].self_attn.q_proj
    handle = q_proj.register_forward_hook(lambda _m, args, _o: rows_seen.append(args[0].shape[:-1].numel()))
    cache = stack.new_cache(reserve=2)
    with torch.no_grad(), prepacked(stack.model):
        hidden, _ = stack.blocks(
            stack.embed(ids), range(stack.total), mask, positions, cache, allow_skip=False, packed=packed
        )
        handle.remove()
        step_ids = ids[:, -1:].flip(0)  # any next token per row
        step_mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        step_hidden, _ = stack.blocks(
            stack.embed(step_ids), range(stack.total), step_mask, positions[:, -1:] + 1, cache, allow_skip=False
        )
        logits = stack.logits(step_hidden)
    return {"hidden": hidden, "cache": cache, "logits": logits, "rows_seen": rows_seen[0]}


@pytest.mark.parametrize("subject", SUBJECTS)
def test_a_packed_prompt_pass_gives_the_padded_pass_bits(subject, tiny_model_dir, chat_bases, chat_data):
    """Packed, the products see only the real tokens; the real tokens' outputs, their keys and values, and the next
    step's logits equal the padded pass's bit for bit; the cache holds zeros where padding was."""
    stack, ids, mask = padded_pass(subject_dir(subject, tiny_model_dir, chat_bases), chat_data)
    real = mask.bool()
    padded = _pass_and_step(stack, ids, mask, packed=False)
    packed = _pass_and_step(stack, ids, mask, packed=True)

    assert padded["rows_seen"] == mask.numel()
    assert packed["rows_seen"] == int(mask.sum()) < mask.numel()
    assert torch.equal(packed["hidden"][real], padded["hidden"][real])
    assert not packed["hidden"][~real].any()
    for layer_packed, layer_padded in zip(packed["cache"].layers, padded["cache"].layers, strict=True):
        for kind in ("keys", "values"):
            ours, theirs = getattr(layer_packed, kind), getattr(layer_padded, kind)
            assert torch.equal(
                ours.transpose(1, 2)[:, : mask.shape[1]][real], theirs.transpose(1, 2)[:, : mask.shape[1]][real]
            )
            assert not ours.transpose(1, 2)[:, : mask.shape[1]][~real].any()
    assert torch.equal(packed["logits"], padded["logits"])


def test_a_pass_without_padding_or_outside_prepacked_products_is_not_packed(tiny_model_dir, chat_data):
    """Packing is for a padded pass of a model whose products the shared engines pack: a pass with no padding, or an
    eager model, runs as it is."""
    from access.packed_rows import packs

    stack, _ids, mask = padded_pass(tiny_model_dir, chat_data)
    assert packs(stack.model, mask)
    assert not packs(stack.model, torch.ones_like(mask))
    assert not packs(stack.model, mask[:, -1:])  # one position: a decode step
    stack.model.config._attn_implementation = "eager"
    assert not packs(stack.model, mask)


def test_settled_rows_keep_their_places_and_fill_the_gaps():
    """The rows kept from ``start`` on: those already in range stay put, the others fill the gaps in order."""
    assert settled([0, 1, 3, 5], 0) == [0, 1, 5, 3]
    assert settled([0, 1, 2], 0) == [0, 1, 2]
    assert settled([5, 7], 2) == [5, 7]  # the second arm after two rows of the first: both move down
    assert settled([3, 5, 6], 3) == [3, 6, 5]


def test_finished_rows_leave_the_cache_in_place_with_the_same_rows():
    """Selecting settled rows of a growing cache copies only the moved rows into its own buffer and gives the rows a
    fresh selection would; any other selection is a new buffer."""
    from transformers import LlamaConfig

    config = LlamaConfig(num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, hidden_size=8)
    cache = new_cache(config, reserve=3)
    keys = torch.arange(6.0).reshape(6, 1, 1, 1).expand(6, 1, 4, 4).contiguous()
    cache.update(keys, -keys, 0)
    buffer = cache.layers[0]._buffers[0]
    keep = settled([0, 1, 3, 5], 0)
    select_rows(cache, keep, torch.device("cpu"))
    layer = cache.layers[0]
    assert layer.keys[:, 0, 0, 0].tolist() == [0.0, 1.0, 5.0, 3.0]
    assert torch.equal(layer.values, -layer.keys)
    assert layer._buffers[0].data_ptr() == buffer.data_ptr(), "the kept rows stay in their buffer"
    select_rows(cache, [3, 2, 1, 0], torch.device("cpu"))  # every row moves: a new buffer
    assert layer.keys[:, 0, 0, 0].tolist() == [3.0, 5.0, 1.0, 0.0]
    assert layer._buffers[0].data_ptr() != buffer.data_ptr()


def test_compaction_keeps_each_arms_rows_one_slice_in_step_with_the_cache():
    """Two arms of four prompts; after rows finish and the batch compacts, each arm's rows are still one slice, and
    each cache row holds the row the batch says it does."""
    ids, mask = torch.arange(4).reshape(4, 1), torch.ones(4, 1, dtype=torch.long)
    batch = DecodeBatch.start([0, 1], ids, mask, torch.zeros(4, dtype=torch.long))
    from transformers import LlamaConfig

    config = LlamaConfig(num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, hidden_size=8)
    batch.upper = new_cache(config, reserve=3)
    identity = torch.tensor([10 * arm + prompt for arm in (0, 1) for prompt in range(4)], dtype=torch.float32)
    batch.upper.update(identity.reshape(8, 1, 1, 1).expand(8, 1, 2, 2).contiguous(), torch.zeros(8, 1, 2, 2), 0)
    batch.row_alive = [True, False, True, True, False, True, True, False]  # 3 of 8 finished: compacts
    batch.regroup([7] * 8)
    assert batch.spans == {0: (0, 3), 1: (3, 5)}
    assert [batch.row_arm[r] for r in range(5)] == [0, 0, 0, 1, 1]
    held = batch.upper.layers[0].keys[:, 0, 0, 0].tolist()
    assert held == [10.0 * arm + prompt for arm, prompt in zip(batch.row_arm, batch.row_prompt, strict=True)]
