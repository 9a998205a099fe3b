"""How responses are decoded: :class:`GenerationConfig`, and the evaluation's settings.

These are plain settings, kept apart from :mod:`access.generation` (which needs torch) so
that the ``probe`` command can show their defaults in ``--help`` without importing torch.
``EVAL_GENERATION`` is what ``probe models eval`` and :func:`training.evaluate.evaluate_pair`
use unless told otherwise: greedy, 64 new tokens, 64 prompts a batch. A decode step on a CPU reads every weight
whatever the batch, so fewer, larger batches decode faster: on the default pair's 162 held-out rows, 64 a batch took
201 s against 32's 256 s per model (2 cores, 2026-11-29), with the same responses, and the caches of 64 rows of up to
460 tokens hold 1.4 GB for SmolLM2-135M (``--batch-size`` lowers it for a larger model).

Example:
    >>> EVAL_GENERATION.max_new_tokens, EVAL_GENERATION.do_sample
    (64, False)
    >>> GenerationConfig(max_new_tokens=0)
    Traceback (most recent call last):
    ...
    core.config_file.OptionError: --max-new-tokens: expected an integer in [1, 1000000], got 0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from core.config_fields import option
from core.config_file import ABOVE_ZERO, POSITIVE, SEED, Range, typed_config

TEMPERATURE = ABOVE_ZERO
TOP_P = Range(0, 1, low_open=True)  # nucleus sampling keeps tokens up to this much probability; 1 keeps all


@dataclass(frozen=True)
@typed_config
class GenerationConfig:
    """Bounds are in the hints (:mod:`core.config_file`), help and flags on the fields (:mod:`core.config_fields`);
    a config holds one as a nested config (``ABConfig.generation``)."""

    max_new_tokens: Annotated[int, POSITIVE] = option(64, "Tokens generated per prompt.")
    batch_size: Annotated[int, POSITIVE] = option(16, "Prompts per generation batch.")
    do_sample: bool = option(
        False,
        "Seeded sampling instead of greedy decoding (the same seed in every pass).",
        flag="--sample",
        off_flag="--greedy",
    )
    temperature: Annotated[float, TEMPERATURE] = option(1.0, "Sampling temperature (with --sample).")
    top_p: Annotated[float, TOP_P] = option(1.0, "Nucleus sampling: the smallest set of tokens this likely.", flag=None)
    seed: Annotated[int, SEED] = option(0, "Seed of sampling.")

    def generate_kwargs(self, pad_id: int, stop: list[int]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "pad_token_id": pad_id, "eos_token_id": stop}
        if self.do_sample:
            kwargs.update(do_sample=True, temperature=self.temperature, top_p=self.top_p)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        return kwargs


EVAL_GENERATION = GenerationConfig(max_new_tokens=64, batch_size=64)
