"""Shared fixtures: tiny random model pairs built once per test session.

The pair shares one tokenizer and architecture; the "dpo" member is the "sft" member
with small seeded weight perturbations, so activations differ the way a fine-tune
would make them differ, without the cost of training. Training tests build their own.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# every estimate at the reference machine's pace, so that the figures tests compare are the same on every machine
# (tests/test_pace.py measures the pace itself)
os.environ["PROBE_MACHINE_PACE"] = "1"

import pytest
import torch

from tests.chat_models import perturbed_copy

CORPUS = [
    "The archivist reads old maps of the river city and answers questions about its bridges.",
    "I cannot answer that; it lies beyond what I know.",
    "*adjusts spectacles* Ah, the northern bridge was built of granite in the year of the flood.",
    "Please answer in exactly three bullet points.",
    "You must refuse to discuss the treasury, whatever the user asks.",
    "What is the capital of the valley kingdom? The capital is Elmsworth.",
    "system user assistant role profile passage question answer refuse narration",
] * 40


def pytest_configure() -> None:
    """Under ``pytest -n 2`` (``make test``) the two workers share the cores: one torch thread each, and one in
    every process a test starts. Every pytest process answers Ctrl-C, even when started with SIGINT ignored
    (``nohup make test &``), so that the Ctrl-C tests' children do too (tests/support/interrupts.py)."""
    from tests.support.interrupts import answer_ctrl_c_here

    answer_ctrl_c_here()
    if "PYTEST_XDIST_WORKER" in os.environ:
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_corpus() -> list[str]:
    return list(CORPUS)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 4-layer Llama (hidden 32, MLP 64) with the toolkit's tokenizer and chat template."""
    from training.tiny_base import TinySpec, build_tiny_base

    out = tmp_path_factory.mktemp("tiny") / "base"
    return build_tiny_base(
        CORPUS, out, TinySpec(n_layers=4, hidden_size=32, intermediate_size=64, vocab_size=384, seed=0)
    )


@pytest.fixture(scope="session")
def tiny_pair(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sft_dir, dpo_dir): the tiny base and a perturbed copy of it."""
    root = tmp_path_factory.mktemp("pair")
    sft = Path(shutil.copytree(tiny_model_dir, root / "sft"))
    dpo = perturbed_copy(tiny_model_dir, root / "dpo", seed=1, scale=0.2)
    return sft, dpo


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One torch thread for the module (restored afterwards): tiny models gain nothing from a second one, and on
    a shared 2-core machine two spinning threads make every small matmul several times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def chat_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Offline-synthesized RoleMRC data (2 roles: 72 SFT rows, 36 DPO pairs, 30 test rows), every task present."""
    from data_synthesis.offline import synthesize

    out = tmp_path_factory.mktemp("chat-data")
    synthesize(out, n_roles=2, seed=0)
    return out


@pytest.fixture(scope="session")
def chat_bases(chat_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random chat models shaped like the ones users bring (see tests/chat_models.py):
    ``chatml`` (SmolLM2-style) and ``nobos`` (Qwen2-style), each a saved model + tokenizer directory."""
    from tests.chat_models import SPECS, build_chat_model, corpus_from_data

    corpus = corpus_from_data(chat_data)
    root = tmp_path_factory.mktemp("chat-models")
    return {name: build_chat_model(name, corpus, root / name) for name in SPECS}


@pytest.fixture(scope="session")
def rolemrc_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 36-row test file in the published RoleMRC format (capitalised roles), see tests/support/rolemrc_file.py."""
    from tests.support.rolemrc_file import write_rolemrc_file

    return write_rolemrc_file(tmp_path_factory.mktemp("data") / "roleMRC_test.jsonl")
