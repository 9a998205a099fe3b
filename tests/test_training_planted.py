"""The planted-ground-truth pair: only the planted units differ, by exactly the documented change."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core.errors import ProbeError
from training.default_pair import PAIR_NAMES, ensure_default_pair, recipe_for
from training.planted import PLANTED_FILE, WEIGHTS, plant_units, read_planted, tensor_sha256

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The registered ``planted-tiny`` pair, built in a temporary $PROBE_HOME (seconds)."""
    return ensure_default_pair(tmp_path_factory.mktemp("home"), pair="planted-tiny", progress=False).root


def _tensors(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(model_dir / WEIGHTS))


def test_planted_pairs_are_registered_names() -> None:
    assert {"planted", "planted-tiny"} <= set(PAIR_NAMES)
    assert recipe_for("planted").dir_name != recipe_for("smollm2").dir_name


def test_only_the_planted_rows_differ_and_every_other_tensor_is_byte_identical(planted: Path) -> None:
    pair = read_planted(planted)
    sft, dpo = _tensors(pair.sft_dir), _tensors(pair.dpo_dir)
    assert sft.keys() == dpo.keys()
    record = json.loads((pair.dpo_dir / PLANTED_FILE).read_text())
    changed = {f"model.layers.{layer}.mlp.up_proj.weight" for layer, _ in pair.units}
    assert set(record["changed"]) == changed
    for name in sft.keys() - changed:
        assert tensor_sha256(sft[name]) == tensor_sha256(dpo[name]) == record["unchanged_sha256"][name], name
    assert set(record["unchanged_sha256"]) == sft.keys() - changed
    for name in changed:
        rows = {unit for layer, unit in pair.units if name == f"model.layers.{layer}.mlp.up_proj.weight"}
        keep = [i for i in range(sft[name].shape[0]) if i not in rows]
        assert torch.equal(sft[name][keep], dpo[name][keep])
        for unit in rows:
            assert torch.equal(dpo[name][unit], sft[name][unit] * pair.factor)
    for other in ("config.json", "tokenizer.json", "generation_config.json"):
        assert (pair.sft_dir / other).read_bytes() == (pair.dpo_dir / other).read_bytes()


def test_planted_units_activations_are_factor_times_on_the_same_input(planted: Path) -> None:
    """At each planted layer, fed the same MLP input, the planted units' mlp_post is x factor and no other changes."""
    from transformers import AutoModelForCausalLM

    pair = read_planted(planted)
    sft = AutoModelForCausalLM.from_pretrained(pair.sft_dir, dtype=torch.float32)
    dpo = AutoModelForCausalLM.from_pretrained(pair.dpo_dir, dtype=torch.float32)
    hidden = torch.randn(2, 5, sft.config.hidden_size, generator=torch.Generator().manual_seed(0))
    for layer in sorted({layer for layer, _ in pair.units}):
        a, b = sft.model.layers[layer].mlp, dpo.model.layers[layer].mlp
        with torch.no_grad():
            post_a = a.act_fn(a.gate_proj(hidden)) * a.up_proj(hidden)
            post_b = b.act_fn(b.gate_proj(hidden)) * b.up_proj(hidden)
        units = [unit for planted_layer, unit in pair.units if planted_layer == layer]
        others = [i for i in range(post_a.shape[-1]) if i not in units]
        assert torch.equal(post_a[..., others], post_b[..., others])
        torch.testing.assert_close(post_b[..., units], post_a[..., units] * pair.factor, rtol=1e-5, atol=1e-7)


def test_planted_json_round_trips(planted: Path) -> None:
    pair = read_planted(planted)
    assert pair == read_planted(pair.dpo_dir)
    assert pair.hook == "mlp_post" and pair.factor == 30.0 and len(pair.units) == 16
    assert list(pair.units) == sorted(set(pair.units))
    assert pair.data_dir == planted / "data" and (pair.data_dir / "test.jsonl").is_file()
    assert len({layer for layer, _ in pair.units}) > 1  # spread over layers


def test_same_seed_same_units_and_bytes(planted: Path, tmp_path: Path) -> None:
    pair = read_planted(planted)
    again = plant_units(pair.sft_dir, tmp_path / "again", units=16, factor=30.0, seed=0)
    assert again == pair.units
    assert (tmp_path / "again" / WEIGHTS).read_bytes() == (pair.dpo_dir / WEIGHTS).read_bytes()
    assert plant_units(pair.sft_dir, tmp_path / "other", units=16, seed=1) != pair.units


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"units": 0}, "--units 0: expected at least 1"),
        ({"units": 10**9}, "--units 1000000000: expected at most"),
        ({"factor": 1.0}, "--factor 1.0: expected a finite number other than 1"),
        ({"factor": float("nan")}, "--factor nan"),
        ({"layers": [99]}, "--layers 99: expected layers in 0-7"),
    ],
)
def test_bad_arguments_are_one_line(planted: Path, tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ProbeError) as caught:
        plant_units(planted / "sft", tmp_path / "out", **kwargs)  # type: ignore[arg-type]
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_bad_directories_are_one_line(planted: Path, tmp_path: Path) -> None:
    with pytest.raises(ProbeError, match="expected a model directory with config"):
        plant_units(tmp_path, tmp_path / "out")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep")
    with pytest.raises(ProbeError, match="expected an absent or empty directory"):
        plant_units(planted / "sft", tmp_path / "full")
    assert (tmp_path / "full" / "x").read_text() == "keep"
    with pytest.raises(ProbeError, match="no planted"):
        read_planted(planted / "sft")


def test_cli_lists_and_refuses_pair_names(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "probe_cli", "models", "default", "--home", str(tmp_path), "--pair", "nope"]
    done = subprocess.run(command, capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": ""})
    assert done.returncode == 2
    assert "expected one of smollm2, tiny, planted, planted-tiny" in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_prints_the_planted_units(tmp_path: Path) -> None:
    from tests.chat_models import cli

    code, out, _ = cli("models", "default", "--pair", "planted-tiny", "--home", tmp_path, "--quiet")
    assert code == 0
    units = read_planted(tmp_path / "tiny_planted_pair").units
    assert "planted" in out and "mlp_post" in out
    assert f"{units[0][0]}:{units[0][1]}" in out
