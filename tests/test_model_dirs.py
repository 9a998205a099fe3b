"""Broken model directories: one ``error:`` line naming the flag and the file, exit 2, from every command.

Each case damages a copy of the tiny model the way disks and interrupted copies do: a
truncated or zero-byte ``model.safetensors``, a header of random bytes or one whose length
field lies, a shard named in ``model.safetensors.index.json`` that is missing, a config
that is not UTF-8, not JSON or not a model config. ``probe run --sft DIR`` (where a
truncated file used to end in a safetensors traceback) meets every case; each other
command that loads a model meets a truncated file, through the same check. The check reads
headers only; a test pins that it never loads tensors.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from core.errors import ProbeError
from core.models import check_model_dir
from tests.support.cli import one_line_error


def _truncate(d: Path) -> None:
    weights = d / "model.safetensors"
    with weights.open("r+b") as handle:
        handle.truncate(weights.stat().st_size * 2 // 3)


def _garbage_header(d: Path) -> None:
    weights = d / "model.safetensors"
    data = bytearray(weights.read_bytes())
    header = int.from_bytes(data[:8], "little")
    data[8 : 8 + header] = bytes((37 * i + 11) % 256 for i in range(header))
    weights.write_bytes(bytes(data))


def _lying_length(d: Path) -> None:
    weights = d / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[:8] = (2**40).to_bytes(8, "little")
    weights.write_bytes(bytes(data))


def _zero_bytes(d: Path) -> None:
    (d / "model.safetensors").write_bytes(b"")


def _missing_shard(d: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(d))
    (d / "model.safetensors").unlink()
    model.save_pretrained(str(d), max_shard_size="100KB")
    shards = sorted(d.glob("model-*.safetensors"))
    assert len(shards) > 1 and (d / "model.safetensors.index.json").is_file()
    shards[-1].unlink()


def _config_not_utf8(d: Path) -> None:
    (d / "config.json").write_bytes(b"\xff\xfe{\x00\x93garbage")


def _config_malformed(d: Path) -> None:
    (d / "config.json").write_text('{"model_type": "llama",\n  "hidden_size": 32,\n', encoding="utf-8")


def _config_not_a_config(d: Path) -> None:
    (d / "config.json").write_text("[1, 2, 3]", encoding="utf-8")


DAMAGE: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "truncated": (_truncate, ("model.safetensors", "damaged safetensors file: truncated")),
    "garbage header": (_garbage_header, ("model.safetensors", "damaged safetensors file", "header is not valid JSON")),
    "header length lies": (_lying_length, ("model.safetensors", "damaged safetensors file", "header length")),
    "zero bytes": (_zero_bytes, ("model.safetensors", "empty weights file (0 bytes)")),
    "missing shard": (_missing_shard, ("named in model.safetensors.index.json is missing",)),
    "config not UTF-8": (_config_not_utf8, ("config.json", "not UTF-8")),
    "config malformed": (_config_malformed, ("config.json:3", "malformed JSON")),
    "config not a config": (_config_not_a_config, ("config.json", "not a model config")),
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from data_synthesis.offline import synthesize

    out = tmp_path_factory.mktemp("model-dir-data")
    synthesize(out, n_roles=2, seed=0)
    return out


def damaged(source: Path, root: Path, kind: str) -> Path:
    target = Path(shutil.copytree(source, root / kind.replace(" ", "_")))
    DAMAGE[kind][0](target)
    return target


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_probe_run_refuses_a_damaged_sft_dir_in_one_line(
    kind: str, tiny_pair: tuple[Path, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = damaged(tiny_pair[0], tmp_path, kind)
    line = one_line_error(
        capsys,
        [
            "run",
            "--sft",
            str(bad),
            "--dpo",
            str(tiny_pair[1]),
            "--data",
            str(data / "test.jsonl"),
            "--capability",
            "multi_turn",
            "--no-analyze",
            "--out",
            str(tmp_path / "run"),
        ],
        "--sft",
        *DAMAGE[kind][1],
    )
    assert str(bad) in line


def _commands(bad: Path, good: Path, data: Path, out: Path) -> dict[str, list[str]]:
    test = str(data / "test.jsonl")
    return {
        "intervene": [
            "intervene",
            "--model-dir",
            str(bad),
            "--data",
            test,
            "--units",
            "1:0",
            "--placebo",
            "0",
            "--out",
            str(out),
        ],
        "models eval": ["models", "eval", "--sft", str(good), "--dpo", str(bad), "--test", test, "--max-rows", "2"],
        "train sft": ["train", "sft", "--base", str(bad), "--data", str(data), "--out", str(out), "--max-steps", "1"],
        "train dpo": ["train", "dpo", "--sft", str(bad), "--data", str(data), "--out", str(out), "--max-steps", "1"],
    }


@pytest.mark.parametrize("command", ["intervene", "models eval", "train sft", "train dpo"])
def test_every_loader_refuses_a_truncated_weights_file(
    command: str, tiny_pair: tuple[Path, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = damaged(tiny_pair[0], tmp_path, "truncated")
    argv = _commands(bad, tiny_pair[1], data, tmp_path / "out")[command]
    one_line_error(capsys, argv, "model.safetensors", "truncated")
    assert not (tmp_path / "out").exists()


def test_a_whole_sharded_model_passes_and_nothing_is_loaded(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoModelForCausalLM

    sharded = Path(shutil.copytree(tiny_model_dir, tmp_path / "sharded"))
    model = AutoModelForCausalLM.from_pretrained(str(sharded))
    (sharded / "model.safetensors").unlink()
    model.save_pretrained(str(sharded), max_shard_size="100KB")
    import safetensors.torch

    def no_tensors(*args: object, **kwargs: object) -> None:
        raise AssertionError("the check must not load tensors")

    monkeypatch.setattr(safetensors.torch, "load_file", no_tensors)
    assert check_model_dir(sharded, "--sft")["model_type"] == "llama"


def test_a_shard_index_without_a_weight_map_is_named(tiny_model_dir: Path, tmp_path: Path) -> None:
    d = Path(shutil.copytree(tiny_model_dir, tmp_path / "m"))
    (d / "model.safetensors").unlink()
    (d / "model.safetensors.index.json").write_text('{"metadata": {}}', encoding="utf-8")
    with pytest.raises(ProbeError, match="not a weight index"):
        check_model_dir(d, "--model-dir")
