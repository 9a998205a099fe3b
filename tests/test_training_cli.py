"""``probe train`` / ``probe models`` through the CLI: clear one-line errors with exit 2, and real training runs.

Each error case is cheap: it must be caught before a model trains. The errors and the SFT-then-DPO
run call the entry point in this process (:func:`tests.support.cli.exit_of`, exactly what the
console script calls: about 8 s of imports saved per command); the two-process run starts the
installed module under ``accelerate launch`` as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from core.rows import write_jsonl
from core.schema import DPORow, SFTRow, Turn
from tests.support.cli import exit_of
from tests.support.ports import free_port

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[1]
Probe = Callable[..., tuple[int, str]]


@pytest.fixture
def probe(capsys: pytest.CaptureFixture[str]) -> Probe:
    """``probe ARGS`` in this process: (exit status, stderr)."""

    def run(*args: str) -> tuple[int, str]:
        capsys.readouterr()
        code, _, err = exit_of(list(args), capsys)
        return code, err

    return run


def one_line_error(result: tuple[int, str], *needles: str) -> None:
    code, stderr = result
    assert code == 2, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert "Traceback" not in stderr
    text = " ".join(lines)
    for needle in needles:
        assert needle in text, text


@pytest.fixture(scope="module")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli-data")
    system = Turn("system", 'You are Ada, a smith. Your catchphrase is "Onward!".')
    rows = [
        SFTRow([system, Turn("user", f"Question {i}?"), Turn("assistant", f"Onward! Answer {i}.")]) for i in range(8)
    ]
    write_jsonl(out / "sft.jsonl", rows)
    pairs = [DPORow([system, Turn("user", f"Question {i}?")], f"Onward! Answer {i}.", "No.") for i in range(8)]
    write_jsonl(out / "dpo.jsonl", pairs)
    return out


def test_missing_base_directory(probe: Probe, small_data: Path, tmp_path: Path) -> None:
    result = probe(
        "train", "sft", "--base", str(tmp_path / "nowhere"), "--data", str(small_data), "--out", str(tmp_path / "o")
    )
    one_line_error(result, "--base", "no such directory")
    assert not (tmp_path / "o").exists()


def test_base_directory_that_is_not_a_model(probe: Probe, small_data: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = probe(
        "train", "sft", "--base", str(tmp_path / "empty"), "--data", str(small_data), "--out", str(tmp_path / "o")
    )
    one_line_error(result, "--base", "no config.json")


def test_empty_dataset(probe: Probe, tmp_path: Path, tiny_model_dir: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sft.jsonl").write_text("\n")
    result = probe(
        "train", "sft", "--base", str(tiny_model_dir), "--data", str(tmp_path / "data"), "--out", str(tmp_path / "o")
    )
    one_line_error(result, "sft.jsonl", "no rows")


@pytest.mark.usefixtures("tiny_model_dir")
def test_malformed_dataset_line_is_named(probe: Probe, tmp_path: Path) -> None:
    (tmp_path / "sft.jsonl").write_text('{"conversations": [{"role": "user", "content": "hi"}]}\n{"nope": 1}\n')
    result = probe(
        "train", "sft", "--base", "tiny", "--data", str(tmp_path / "sft.jsonl"), "--out", str(tmp_path / "o")
    )
    one_line_error(result, "sft.jsonl:1", "expected the last turn to be assistant")


def test_missing_required_option(probe: Probe, small_data: Path) -> None:
    one_line_error(probe("train", "sft", "--data", str(small_data), "--out", "x"), "--base")


def test_dpo_reference_with_another_tokenizer(
    probe: Probe, small_data: Path, tmp_path: Path, tiny_model_dir: Path
) -> None:
    from training.tiny_base import TinySpec, build_tiny_base

    other = build_tiny_base(
        ["a completely different corpus of words"] * 30,
        tmp_path / "other",
        TinySpec(n_layers=2, hidden_size=32, intermediate_size=64, vocab_size=300),
    )
    result = probe(
        "train",
        "dpo",
        "--sft",
        str(tiny_model_dir),
        "--ref",
        str(other),
        "--data",
        str(small_data),
        "--out",
        str(tmp_path / "o"),
    )
    one_line_error(result, "tokenizer mismatch", "--ref")


def test_tokenizer_larger_than_the_model_embeddings(
    probe: Probe, small_data: Path, tmp_path: Path, tiny_model_dir: Path
) -> None:
    import shutil

    from transformers import AutoTokenizer

    broken = Path(shutil.copytree(tiny_model_dir, tmp_path / "broken"))
    tokenizer = AutoTokenizer.from_pretrained(broken)
    tokenizer.add_tokens([f"<extra_{i}>" for i in range(50)])
    tokenizer.save_pretrained(broken)
    result = probe("train", "dpo", "--sft", str(broken), "--data", str(small_data), "--out", str(tmp_path / "o"))
    one_line_error(result, "tokenizer mismatch", "embeds only")


def test_bad_flag_value_and_bad_config(probe: Probe, small_data: Path, tmp_path: Path) -> None:
    one_line_error(
        probe("train", "sft", "--base", "tiny", "--data", str(small_data), "--out", "x", "--lr", "-1"),
        "--learning-rate",
    )
    (tmp_path / "c.yaml").write_text("lr_typo: 1\n")
    one_line_error(probe("train", "sft", "--config", str(tmp_path / "c.yaml")), "lr_typo")


@pytest.mark.slow
def test_cli_trains_sft_then_dpo(probe: Probe, small_data: Path, tmp_path: Path) -> None:
    sft = tmp_path / "sft"
    result = probe(
        "train",
        "sft",
        "--base",
        "tiny",
        "--tiny-layers",
        "2",
        "--tiny-width",
        "32",
        "--tiny-mlp",
        "64",
        "--data",
        str(small_data),
        "--out",
        str(sft),
        "--max-steps",
        "2",
        "--batch-size",
        "4",
    )
    assert result[0] == 0, result[1]
    assert json.loads((sft / "provenance.json").read_text())["parent"]["tiny_spec"]["n_layers"] == 2
    config = tmp_path / "dpo.json"
    config.write_text(json.dumps({"max_steps": 2, "batch_size": 4, "beta": 0.2}))
    result = probe(
        "train",
        "dpo",
        "--sft",
        str(sft),
        "--data",
        str(small_data),
        "--out",
        str(tmp_path / "dpo"),
        "--config",
        str(config),
    )
    assert result[0] == 0, result[1]
    record = json.loads((tmp_path / "dpo" / "provenance.json").read_text())
    assert record["config"]["beta"] == 0.2 and len(record["losses"]) == 2


@pytest.mark.slow
def test_two_process_cpu_run_under_accelerate(small_data: Path, tmp_path: Path) -> None:
    """The same command under `accelerate launch` (2 CPU processes, gloo): one model, world size 2 recorded."""
    out = tmp_path / "sft-ddp"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    # `--cpu` would pick accelerate's single-process launcher; `--multi_gpu` picks torchrun, and the toolkit
    # creates its process state with cpu=True when there is no CUDA, so the 2 processes join over gloo.
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
        "--module",
        "probe_cli.main",
        "train",
        "sft",
        "--base",
        "tiny",
        "--tiny-layers",
        "2",
        "--tiny-width",
        "32",
        "--tiny-mlp",
        "64",
        "--data",
        str(small_data),
        "--out",
        str(out),
        "--max-steps",
        "2",
        "--batch-size",
        "2",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((out / "provenance.json").read_text())
    assert record["world_size"] == 2 and len(record["losses"]) == 2
    assert not (tmp_path / ".sft-ddp.partial").exists() and not (out / "_tiny_base").exists()
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(out).config.num_hidden_layers == 2
