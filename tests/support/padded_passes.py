"""A left-padded prompt pass of rendered held-out prompts on the walk's subjects (the tiny Llama, ChatML with a BOS on
every turn and tied embeddings, a Qwen2 without a BOS): what the stack's attention and packing tests run."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from access.generation import Generator
from access.stack import Stack
from core.chat import left_pad
from core.decoding import GenerationConfig
from core.rows import read_test_rows

SUBJECTS = ("llama", "chatml", "nobos")


def subject_dir(subject: str, tiny_model_dir: Path, chat_bases: dict[str, Path]) -> Path:
    """The model directory of one of :data:`SUBJECTS`."""
    return {"llama": tiny_model_dir, **chat_bases}[subject]


def padded_pass(model_dir: Path, chat_data: Path) -> tuple[Stack, torch.Tensor, torch.Tensor]:
    """A sdpa model's stack and a left-padded batch of five rendered held-out prompts of different lengths."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa").eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = read_test_rows(chat_data / "test.jsonl")[:5]
    generator = Generator(model, tokenizer, [r.question for r in rows], GenerationConfig(max_new_tokens=1))
    prompts = [list(p[: 20 + 7 * k]) for k, p in enumerate(generator.prompts)]  # five lengths: four rows padded
    ids, mask = left_pad(prompts, generator.pad_id)
    return Stack(model), ids, mask
