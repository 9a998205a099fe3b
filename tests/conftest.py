"""Shared fixtures: tiny random model pairs built once per test session.

The pair shares one tokenizer and architecture; the "dpo" member is the "sft" member
with small seeded weight perturbations, so activations differ the way a fine-tune
would make them differ, without the cost of training. Training tests build their own.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch

CORPUS = [
    "The archivist reads old maps of the river city and answers questions about its bridges.",
    "I cannot answer that; it lies beyond what I know.",
    "*adjusts spectacles* Ah, the northern bridge was built of granite in the year of the flood.",
    "Please answer in exactly three bullet points.",
    "You must refuse to discuss the treasury, whatever the user asks.",
    "What is the capital of the valley kingdom? The capital is Elmsworth.",
    "system user assistant role profile passage question answer refuse narration",
] * 40


def _perturb(src: Path, dst: Path, seed: int, scale: float) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shutil.copytree(src, dst)
    model = AutoModelForCausalLM.from_pretrained(dst)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale * param.std().clamp_min(1e-3))
    model.save_pretrained(dst)
    AutoTokenizer.from_pretrained(src).save_pretrained(dst)
    return dst


@pytest.fixture(scope="session")
def tiny_corpus() -> list[str]:
    return list(CORPUS)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 4-layer Llama (hidden 32, MLP 64) with the toolkit's tokenizer and chat template."""
    from training.tiny_base import TinySpec, build_tiny_base

    out = tmp_path_factory.mktemp("tiny") / "base"
    return build_tiny_base(CORPUS, out, TinySpec(n_layers=4, hidden_size=32, intermediate_size=64, vocab_size=384, seed=0))


@pytest.fixture(scope="session")
def tiny_pair(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sft_dir, dpo_dir): the tiny base and a perturbed copy of it."""
    root = tmp_path_factory.mktemp("pair")
    sft = Path(shutil.copytree(tiny_model_dir, root / "sft"))
    dpo = _perturb(tiny_model_dir, root / "dpo", seed=1, scale=0.2)
    return sft, dpo
