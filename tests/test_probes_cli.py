"""`probe run`: bad arguments exit 2 with one clear line; a good run records, prints and ranks layers.

Also: a pair that cannot be compared is refused before any weights are loaded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from access.pair import load_pair
from core.errors import ProbeError
from probes.store import RunReader
from tests.support.cli import exit_of


def _pair_args(tiny_pair, data: Path) -> list[str]:
    return ["--sft", str(tiny_pair[0]), "--dpo", str(tiny_pair[1]), "--data", str(data)]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--capability", "multiturn"], "unknown capability 'multiturn'; expected one of knowledge_boundary"),
        (
            ["--capability", "multi_turn", "--hook", "mlp_in"],
            "unknown hook point 'mlp_in'; expected one of mlp_out, attn_out, resid_post, mlp_post",
        ),
        (
            ["--capability", "multi_turn", "--backend", "pyvene"],
            "--backend: expected one of torch, transformer_lens, nnsight, got 'pyvene'",
        ),
        (
            ["--capability", "multi_turn", "--layers", "12-31"],
            "--layers '12-31': layer 12 is outside the model, which has layers 0-3",
        ),
        (["--capability", "multi_turn", "--layers", "3-1"], "--layers '3-1': expected a range like 12-31"),
        (
            ["--capability", "multi_turn", "--position", "first"],
            "--position: expected one of last, mean, response_mean, response_last, got 'first'",
        ),
        (
            ["--capability", "multi_turn", "--batch-size", "0"],
            "--batch-size: expected an integer in [1, 1000000], got 0",
        ),
        (
            ["--capability", "multi_turn", "--store-dtype", "bfloat16"],
            "--store-dtype: expected one of float16, float32, got 'bfloat16'",
        ),
    ],
)
def test_bad_arguments_exit_2_with_one_clear_line(
    tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys, args, message
) -> None:
    code, _, err = exit_of(["run", *args, *_pair_args(tiny_pair, rolemrc_file), "--out", str(tmp_path / "r")], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert not (tmp_path / "r" / "activations.h5").exists()


def test_a_data_file_without_the_capability_is_refused(tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys) -> None:
    only_priority = tmp_path / "priority_only.jsonl"
    lines = rolemrc_file.read_text().splitlines()
    only_priority.write_text("".join(line + "\n" for line in lines if '-refused"' in line))
    code, _, err = exit_of(
        [
            "run",
            "-c",
            "multi_turn",
            "--sft",
            str(tiny_pair[0]),
            "--dpo",
            str(tiny_pair[1]),
            "--data",
            str(only_priority),
            "--out",
            str(tmp_path / "r"),
        ],
        capsys,
    )
    assert code == 2 and "no row belongs to multi_turn (4 rows in the file)" in err


def test_missing_model_dir_and_half_a_pair_are_refused(tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys) -> None:
    code, _, err = exit_of(
        ["run", "-c", "multi_turn", "--sft", str(tmp_path / "nope"), "--dpo", str(tiny_pair[1])], capsys
    )
    assert code == 2 and "--sft" in err and "not a model directory" in err
    code, _, err = exit_of(["run", "-c", "multi_turn", "--sft", str(tiny_pair[0]), "--data", str(rolemrc_file)], capsys)
    assert code == 2 and "give both --sft and --dpo" in err


@pytest.mark.slow
def test_probe_run_with_no_paths_uses_the_default_pair_and_a_new_runs_dir(
    tiny_pair,
    rolemrc_file: Path,
    tmp_path: Path,
    capsys,
    monkeypatch,
) -> None:
    import training.default_pair as default_pair

    fake = default_pair.DefaultPair(tmp_path, tmp_path, rolemrc_file, tiny_pair[0], tiny_pair[1])
    # the real one trains a pair: minutes
    monkeypatch.setattr(default_pair, "ensure_default_pair", lambda *a, **k: fake)
    monkeypatch.chdir(tmp_path)
    code, printed, _ = exit_of(
        [
            "run",
            "-c",
            "priority",
            "--hook",
            "mlp_out",
            "--hook",
            "attn_out",
            "--layers",
            "1-3",
            "--position",
            "mean",
            "--quiet",
        ],
        capsys,
    )
    assert code == 0
    runs = [p for p in (tmp_path / "runs").iterdir() if not p.is_symlink()]
    assert len(runs) == 1 and runs[0].name.endswith("_priority")
    assert (tmp_path / "runs" / "latest").resolve() == runs[0].resolve()  # what the notebooks open by default
    assert runs[0].name in printed.replace("\n", "") and "priority" in printed and "top discrepancy layers" in printed
    with RunReader(runs[0]) as run:
        assert run.capabilities() == ["priority"] and run.hooks("priority") == ["attn_out", "mlp_out"]
        assert run.settings.position == "mean" and run.layers("priority", "attn_out") == [1, 2, 3]
        assert run.settings.data_file == str(rolemrc_file.resolve())
        assert run.activations("sft", "priority", "attn_out").shape == (4, 3, 32)


def _copy(src: Path, dst: Path) -> Path:
    return Path(shutil.copytree(src, dst))


def _no_weights_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    def refuse(*_a, **_k):
        raise AssertionError("weights were loaded before the pair was checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)


def test_pair_with_other_layer_count_is_refused_before_loading(tiny_pair, tmp_path: Path, monkeypatch) -> None:
    other = _copy(tiny_pair[1], tmp_path / "deeper")
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(other))
    config.update({"num_hidden_layers": 6, "intermediate_size": 96})
    (
        other / "model.safetensors"
    ).unlink()  # weights of that shape: a config alone that disagrees with its weights is refused
    AutoModelForCausalLM.from_config(config).save_pretrained(str(other))
    _no_weights_loaded(monkeypatch)
    with pytest.raises(
        ProbeError, match=r"not comparable: num_hidden_layers: sft 4 vs dpo 6; intermediate_size: sft 64 vs dpo 96"
    ):
        load_pair(tiny_pair[0], other, device="cpu", dtype="float32")


def test_pair_with_other_chat_template_or_vocab_is_refused_before_loading(
    tiny_pair, tmp_path: Path, monkeypatch
) -> None:
    templated = _copy(tiny_pair[1], tmp_path / "templated")
    template = templated / "chat_template.jinja"
    template.write_text(template.read_text().replace("eos_token", "'<|end_of_text|>'"))
    revocab = _copy(tiny_pair[1], tmp_path / "revocab")
    tok = json.loads((revocab / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = sorted(k for k, v in vocab.items() if v > 100)[:2]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (revocab / "tokenizer.json").write_text(json.dumps(tok))
    _no_weights_loaded(monkeypatch)
    with pytest.raises(ProbeError, match="chat template differs"):
        load_pair(tiny_pair[0], templated, device="cpu", dtype="float32")
    with pytest.raises(ProbeError, match="tokenizer vocabulary: 384 vs 384 tokens, 2 with different ids"):
        load_pair(tiny_pair[0], revocab, device="cpu", dtype="float32")
