"""Backends agree, fire every hook exactly once, check widths, and never leak padding."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from access.drivers import HookFiringError, make_backend
from access.hook_table import HOOK_POINTS
from access.pair import load_pair
from core.capabilities import Capability
from core.chat import pad_id_of
from core.rows import read_test_rows
from probes.prompts import build_prompts, make_batch

LAYERS = [0, 1, 2, 3]


@pytest.fixture(scope="module")
def pair(tiny_pair: tuple[Path, Path]):
    return load_pair(*tiny_pair, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def prompts(pair, rolemrc_file: Path):
    return build_prompts(
        pair.tokenizer, read_test_rows(rolemrc_file), Capability.KNOWLEDGE_BOUNDARY, add_generation_prompt=False
    )


def _batch(pair, prompts, start: int, stop: int):
    return make_batch(prompts, range(start, stop), pad_id_of(pair.tokenizer))


def _fresh_model(model_dir: Path) -> nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.mark.slow
def test_three_backends_agree_within_1e5_on_all_hooks(tiny_pair, pair, prompts) -> None:
    batch = _batch(pair, prompts, 0, len(prompts))  # mixed lengths: real left padding
    assert (batch.attention_mask == 0).any()
    model = _fresh_model(tiny_pair[1])  # the TL bridge switches its model to eager attention: keep `pair` pristine
    for position in ("last", "mean"):
        reference = make_backend("torch", pair.dpo, hooks=HOOK_POINTS, layers=LAYERS, position=position).record(batch)
        # the reduction is shared code, so TransformerLens (slow to boot) is checked at the paper's position only
        for name in ("nnsight", "transformer_lens") if position == "last" else ("nnsight",):
            got = make_backend(
                name,
                model,
                hooks=HOOK_POINTS,
                layers=LAYERS,
                position=position,
                tokenizer=pair.tokenizer,
                model_dir=tiny_pair[1],
            ).record(batch)
            for hook in HOOK_POINTS:
                assert (
                    got[hook].shape
                    == reference[hook].shape
                    == (len(batch), len(LAYERS), 64 if hook == "mlp_post" else 32)
                )
                diff = (got[hook] - reference[hook]).abs().max().item()
                assert diff < 1e-5, f"{name} {hook} {position}: max abs diff {diff}"


def test_mlp_post_is_intermediate_size_wide_and_layers_are_selected(pair, prompts) -> None:
    out = make_backend("torch", pair.sft, hooks=("mlp_post", "mlp_out"), layers=[1, 3], position="last").record(
        _batch(pair, prompts, 0, 3)
    )
    assert out["mlp_post"].shape == (3, 2, pair.sft.config.intermediate_size)
    assert out["mlp_out"].shape == (3, 2, pair.sft.config.hidden_size)
    full = make_backend("torch", pair.sft, hooks=("mlp_out",), layers=LAYERS, position="last").record(
        _batch(pair, prompts, 0, 3)
    )
    assert torch.equal(full["mlp_out"][:, [1, 3]], out["mlp_out"])


@pytest.mark.parametrize("backend", ["torch", "nnsight"])
def test_a_prompts_activations_do_not_depend_on_its_batch_mates(tiny_pair, pair, prompts, backend: str) -> None:
    model = pair.sft if backend == "torch" else _fresh_model(tiny_pair[0])
    for position in ("last", "mean"):
        rec = make_backend(
            backend, model, hooks=HOOK_POINTS, layers=LAYERS, position=position, tokenizer=pair.tokenizer
        )
        n = len(prompts)
        alone = rec.record(_batch(pair, prompts, 0, 1))  # the shortest prompt, no padding at all
        crowd = rec.record(_batch(pair, prompts, 0, n))  # with the longest prompts: heavily left-padded
        assert crowd["mlp_out"].shape[0] == n
        for hook in HOOK_POINTS:
            torch.testing.assert_close(crowd[hook][:1], alone[hook], atol=1e-5, rtol=1e-5)


def test_position_ids_count_from_the_first_real_token(pair, prompts) -> None:
    batch = _batch(pair, prompts, 0, len(prompts))
    lengths = batch.attention_mask.sum(1)
    assert torch.equal(batch.position_ids[:, -1], lengths - 1)
    assert batch.input_ids[0, -int(lengths[0])] == pair.tokenizer.bos_token_id


class _DoubleDown(nn.Module):
    """A gated MLP that calls its down-projection twice: the mlp_post hook fires twice per forward."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj, self.act_fn = (
            mlp.gate_proj,
            mlp.up_proj,
            mlp.down_proj,
            mlp.act_fn,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act_fn(self.gate_proj(x)) * self.up_proj(x)
        return 0.5 * self.down_proj(h) + 0.5 * self.down_proj(h)


class _Bypass(nn.Module):
    """An MLP that never calls its down_proj: mlp_post never fires."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.down_proj = mlp.down_proj
        self.width = mlp.down_proj.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(*x.shape[:-1], self.width)


def test_hook_firing_twice_or_never_is_refused(tiny_pair, pair, prompts) -> None:
    batch = _batch(pair, prompts, 0, 2)
    model = _fresh_model(tiny_pair[0])
    model.model.layers[1].mlp = _DoubleDown(model.model.layers[1].mlp)
    with pytest.raises(HookFiringError, match="mlp_post at layer 1 fired 2 times"):
        make_backend("torch", model, hooks=("mlp_post",), layers=LAYERS, position="last").record(batch)
    model = _fresh_model(tiny_pair[0])
    model.model.layers[2].mlp = _Bypass(model.model.layers[2].mlp)
    with pytest.raises(HookFiringError, match=r"never fired.*mlp_post@2"):
        make_backend("torch", model, hooks=("mlp_post",), layers=LAYERS, position="last").record(batch)
    model = _fresh_model(tiny_pair[0])
    model.model.layers[3] = model.model.layers[2]
    with pytest.raises(HookFiringError, match="layers 2 and 3 are the same module"):
        make_backend("torch", model, hooks=("mlp_out",), layers=LAYERS, position="last")


def test_width_mismatch_is_refused(tiny_pair, pair, prompts) -> None:
    model = _fresh_model(tiny_pair[0])
    model.config.intermediate_size = 48  # the config lies about the MLP width
    with pytest.raises(HookFiringError, match="mlp_post at layer 0 has width 64, expected 48"):
        make_backend("torch", model, hooks=("mlp_post",), layers=[0], position="last").record(
            _batch(pair, prompts, 0, 2)
        )


def test_recording_leaves_no_hooks_behind(pair, prompts) -> None:
    before = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in pair.sft.modules())
    make_backend("torch", pair.sft, hooks=HOOK_POINTS, layers=LAYERS, position="mean").record(
        _batch(pair, prompts, 0, 2)
    )
    after = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in pair.sft.modules())
    assert before == after


def _tensors_in(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple, set)):
        return [t for item in value for t in _tensors_in(item)]
    return []


@pytest.mark.parametrize("position", ["last", "mean"])
def test_the_recorder_keeps_no_view_of_a_full_sequence_output(pair, prompts, position: str) -> None:
    """Only [B, W] copies survive a hook: a kept view of a [B, T, W] output pins one such tensor per layer
    and hook until the next batch (measured: peak RSS 4-7x a plain forward's at batch 32)."""
    storages: list[int] = []  # addresses repeat once an output is freed: that is the point
    handles = [
        pair.sft.model.layers[i].mlp.register_forward_hook(
            lambda _m, _a, out: storages.append(out.untyped_storage().data_ptr())
        )
        for i in LAYERS
    ]
    try:
        backend = make_backend("torch", pair.sft, hooks=("mlp_out", "mlp_post"), layers=LAYERS, position=position)
        result = backend.record(_batch(pair, prompts, 0, 4))
    finally:
        for handle in handles:
            handle.remove()
    held = _tensors_in(vars(backend.collector)) + _tensors_in(result)
    assert len(storages) == len(LAYERS) and result["mlp_out"].shape == (4, len(LAYERS), 32)
    assert not {t.untyped_storage().data_ptr() for t in held} & set(storages)
