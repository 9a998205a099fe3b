"""How responses are decoded: :class:`GenerationConfig`, and the evaluation's settings.

These are plain settings, kept apart from :mod:`core.generation` (which needs torch) so
that the ``probe`` command can show their defaults in ``--help`` without importing torch.
``EVAL_GENERATION`` is what ``probe models eval`` and :func:`training.evaluate.evaluate_pair`
use unless told otherwise: greedy, 64 new tokens, 32 prompts a batch.

Example:
    >>> EVAL_GENERATION.max_new_tokens, EVAL_GENERATION.do_sample
    (64, False)
    >>> GenerationConfig(max_new_tokens=0)
    Traceback (most recent call last):
    ...
    core.errors.ProbeError: --max-new-tokens must be at least 1, got 0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.errors import ProbeError


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 64
    batch_size: int = 16
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ProbeError(f"--max-new-tokens must be at least 1, got {self.max_new_tokens}")
        if self.batch_size < 1:
            raise ProbeError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.do_sample and self.temperature <= 0:
            raise ProbeError(f"--temperature must be positive when sampling, got {self.temperature}")

    def generate_kwargs(self, pad_id: int, stop: list[int]) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(max_new_tokens=self.max_new_tokens, pad_token_id=pad_id, eos_token_id=stop)
        if self.do_sample:
            kwargs.update(do_sample=True, temperature=self.temperature, top_p=self.top_p)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        return kwargs


EVAL_GENERATION = GenerationConfig(max_new_tokens=64, batch_size=32)
