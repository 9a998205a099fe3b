"""Per-unit weight change read tensor by tensor: planted edits rank first, an untouched pair is all zeros.

The tiny Llama (4 layers, d_model 32, d_mlp 64) gets edits on known units of each kind: a
gate row (MLP neuron 1:5), a down column (neuron 2:9), a down row (residual coordinate 3:4
of ``mlp_out``) and an attention output row (coordinate 0:7 of ``attn_out``). Each edit also
touches other units a little (a down row holds one entry of every neuron's down column), so
"rank first" is a real test of the bookkeeping, not of zeros elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.checkpoint import Checkpoint
from analysis.weight_change import load_weight_change, save_weight_change, tensor_change, weight_change
from core.errors import ProbeError
from tests.support.planted_weights import edit_weights, shard

HOOKS = ["mlp_post", "mlp_out", "attn_out", "resid_post"]
PLANTED = {"mlp_post": {(1, 5), (2, 9)}, "mlp_out": {(3, 4)}, "attn_out": {(0, 7)}}


def _plant(w: dict) -> None:
    w["model.layers.1.mlp.gate_proj.weight"][5] *= 4.0  # relative change of the gate row: exactly 3
    w["model.layers.2.mlp.down_proj.weight"][:, 9] *= 3.0  # neuron 2:9 writes three times as much
    w["model.layers.3.mlp.down_proj.weight"][4] *= 3.0  # coordinate 4 of layer 3's MLP output
    w["model.layers.0.self_attn.o_proj.weight"][7] *= 3.0  # coordinate 7 of layer 0's attention output


@pytest.fixture(scope="module")
def edited(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return edit_weights(tiny_model_dir, tmp_path_factory.mktemp("weights") / "edited", _plant)


def _top(change, n: int) -> set[tuple[int, int]]:
    flat = np.argsort(-change.relative, axis=None, kind="stable")[:n]
    return {(int(r), int(u)) for r, u in zip(*np.unravel_index(flat, change.relative.shape), strict=True)}


def test_planted_edits_rank_first_and_nothing_else_comes_close(tiny_model_dir: Path, edited: Path) -> None:
    with Checkpoint(tiny_model_dir, "--sft") as a, Checkpoint(edited, "--dpo") as b:
        changes = weight_change(a, b, HOOKS, "sft_dpo")
    for hook, units in PLANTED.items():
        change = changes[hook]
        assert change.relative.shape == (4, 64 if hook == "mlp_post" else 32)
        assert _top(change, len(units)) == units, hook
        planted_min = min(change.relative[u] for u in units)
        rest = np.delete(change.relative.ravel(), [np.ravel_multi_index(u, change.relative.shape) for u in units])
        assert planted_min > 1.5 * rest.max(), hook
    neuron = changes["mlp_post"].unit(1, 5)
    assert neuron["gate"] == pytest.approx(3.0) and neuron["up"] == 0.0 and neuron["down"] == 0.0
    assert changes["mlp_out"].unit(3, 4)["relative"] == pytest.approx(2.0)
    resid = changes["resid_post"]
    assert int(resid.relative[0].argmax()) == 7  # only the attention row of coordinate 7 has moved by then
    assert resid.components["embedding"].max() == 0.0
    assert np.all(np.diff(resid.components["attention"][:, 7]) <= 1e-12)  # accumulated: later blocks dilute, never add


def test_an_untouched_pair_is_zero_everywhere(tiny_model_dir: Path, tmp_path: Path) -> None:
    copy = edit_weights(tiny_model_dir, tmp_path / "copy", lambda _w: None)
    with Checkpoint(tiny_model_dir, "--sft") as a, Checkpoint(copy, "--dpo") as b:
        changes = weight_change(a, b, HOOKS, "sft_dpo")
        assert tensor_change(a, b, b.unembedding_name) == 0.0
    for change in changes.values():
        assert not change.relative.any() and not change.absolute.any()
        assert all(not values.any() for values in change.components.values())


def test_sharded_and_bf16_checkpoints_read_the_same(tiny_model_dir: Path, edited: Path, tmp_path: Path) -> None:
    import torch

    sharded = shard(edited, tmp_path / "sharded")
    half = edit_weights(
        tiny_model_dir, tmp_path / "bf16", lambda w: w.update({k: v.to(torch.bfloat16) for k, v in w.items()})
    )
    with Checkpoint(tiny_model_dir, "--sft") as a, Checkpoint(edited, "--dpo") as b, Checkpoint(sharded, "--dpo") as c:
        assert np.array_equal(
            weight_change(a, b, HOOKS, "t")["mlp_post"].relative, weight_change(a, c, HOOKS, "t")["mlp_post"].relative
        )
        with Checkpoint(half, "--base") as h:
            assert h.mlp_weight(0, "down").dtype == torch.float32
            small = weight_change(h, a, ["mlp_post"], "base_sft")["mlp_post"].relative
    assert 0 < small.max() < 1e-2  # bf16 rounding only


def test_the_map_file_round_trips(tiny_model_dir: Path, edited: Path, tmp_path: Path) -> None:
    with Checkpoint(tiny_model_dir, "--sft") as a, Checkpoint(edited, "--dpo") as b:
        changes = list(weight_change(a, b, ["mlp_post", "resid_post"], "sft_dpo").values())
    models = {"sft": {"dir": str(tiny_model_dir), "weights_sha256": "x"}}
    back, meta = load_weight_change(save_weight_change(changes, tmp_path / "w.h5", models))
    assert meta == models
    for old, new in zip(changes, back, strict=True):
        assert (new.hook, new.transition, new.layers) == (old.hook, old.transition, old.layers)
        assert np.array_equal(new.relative, old.relative) and set(new.components) == set(old.components)


def test_a_pair_of_other_shapes_is_one_line(tiny_model_dir: Path, tmp_path: Path) -> None:
    def narrower(w: dict) -> None:
        for name in list(w):
            if "gate_proj" in name or "up_proj" in name:
                w[name] = w[name][:48].clone()
            elif "down_proj" in name:
                w[name] = w[name][:, :48].clone()

    other = edit_weights(tiny_model_dir, tmp_path / "narrow", narrower, {"intermediate_size": 48})
    with (
        Checkpoint(tiny_model_dir, "--sft") as a,
        Checkpoint(other, "--dpo") as b,
        pytest.raises(ProbeError, match=r"differ in shape.*intermediate_size: --sft 64 vs --dpo 48"),
    ):
        weight_change(a, b, ["mlp_post"], "sft_dpo")
