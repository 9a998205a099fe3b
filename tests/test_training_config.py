"""Run configs: recipes, override order, config files, validation (no training here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import ProbeError
from core.home import probe_home
from training.config import DPORunConfig, SFTRunConfig


def test_paper_recipe_matches_the_roleMRC_scripts() -> None:
    sft = SFTRunConfig(base="b", data="d", out="o", recipe="paper")
    assert (sft.learning_rate, sft.lr_scheduler, sft.warmup_ratio, sft.epochs) == (2e-5, "cosine", 0.04, 1.0)
    dpo = DPORunConfig(sft="s", data="d", out="o", recipe="paper")
    assert (dpo.learning_rate, dpo.lr_scheduler, dpo.warmup_ratio, dpo.epochs, dpo.beta) == (
        4e-7,
        "linear",
        0.1,
        1.0,
        0.1,
    )
    assert dpo.loss_type == "sigmoid" and sft.bf16 is None  # None = bf16 on a GPU only


def test_explicit_values_beat_config_file_which_beats_recipe(tmp_path: Path) -> None:
    file = tmp_path / "sft.yaml"
    file.write_text("learning-rate: 0.01\nbatch_size: 4\nbase: tiny\n")
    cfg = SFTRunConfig.from_sources(file, data="d", out="o", batch_size=2, epochs=None)
    assert cfg.learning_rate == 0.01 and cfg.batch_size == 2 and cfg.base == "tiny"
    assert cfg.epochs == SFTRunConfig(base="tiny", data="d", out="o").epochs  # recipe value
    json_file = tmp_path / "dpo.json"
    json_file.write_text(json.dumps({"beta": 0.5, "recipe": "paper"}))
    assert DPORunConfig.from_sources(json_file, sft="s", data="d", out="o").beta == 0.5


@pytest.mark.parametrize(
    "text, message",
    [
        ("learning_rate: 0.1\nnot_an_option: 3\n", r"unknown option\(s\) not_an_option"),
        ("- a list\n", "expected a mapping"),
        ("a: [unclosed\n", "cannot parse"),
    ],
)
def test_bad_config_files_name_the_file(tmp_path: Path, text: str, message: str) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text(text)
    with pytest.raises(ProbeError, match=message) as info:
        SFTRunConfig.from_sources(file, base="tiny", data="d", out="o")
    assert str(file) in str(info.value)


@pytest.mark.parametrize(
    "field, value, flag",
    [
        ("learning_rate", 0.0, "--learning-rate"),
        ("batch_size", 0, "--batch-size"),
        ("warmup_ratio", 1.5, "--warmup-ratio"),
        ("lr_scheduler", "zigzag", "--lr-scheduler"),
        ("max_steps", 0, "--max-steps"),
        ("recipe", "huge", "--recipe"),
        ("max_length", 8, "--max-length"),
    ],
)
def test_invalid_values_name_the_flag(field: str, value: object, flag: str) -> None:
    with pytest.raises(ProbeError, match=flag):
        SFTRunConfig(base="tiny", data="d", out="o", **{field: value})


def test_unknown_tiny_spec_field_is_rejected() -> None:
    with pytest.raises(ProbeError, match="tiny_spec: unknown field"):
        SFTRunConfig(base="tiny", data="d", out="o", tiny_spec={"n_layer": 2})


def test_bf16_request_on_cpu_is_an_error() -> None:
    import torch

    from training.runner import resolve_bf16

    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    assert resolve_bf16(None) is False
    with pytest.raises(ProbeError, match="--bf16 needs a CUDA GPU"):
        resolve_bf16(True)


def test_to_dict_is_json_ready() -> None:
    cfg = DPORunConfig(sft="s", data="d", out="o")
    data = json.loads(json.dumps(cfg.to_dict()))
    assert data["sft"] == "s" and data["ref"] is None and "_stage" not in data


def test_probe_home_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PROBE_HOME", str(tmp_path / "h"))
    assert probe_home() == tmp_path / "h"
    monkeypatch.setenv("PROBE_HOME", "")
    assert probe_home() == Path.home() / ".cache" / "rolemrc-probe"


def test_recipe_follows_the_model_when_not_named(tmp_path: Path) -> None:
    assert SFTRunConfig(base="tiny", data="d", out="o").recipe == "tiny"
    assert SFTRunConfig(base=str(tmp_path / "Llama-3.1-8B"), data="d", out="o").learning_rate == 2e-5
    real_sft, tiny_sft = tmp_path / "real", tmp_path / "tinysft"
    for path, base in ((real_sft, "/models/llama"), (tiny_sft, "tiny")):
        path.mkdir()
        (path / "provenance.json").write_text(json.dumps({"parent": {"base": base}}))
    assert DPORunConfig(sft=real_sft, data="d", out="o").learning_rate == 4e-7
    assert DPORunConfig(sft=tiny_sft, data="d", out="o").recipe == "tiny"
    assert DPORunConfig(sft=real_sft, data="d", out="o", recipe="tiny").recipe == "tiny"
