"""The measured pace of the toolkit's forward passes, from which every stage estimates its time before it runs.

Measured on the default pair (SmolLM2-135M, 134.5 M parameters), CPU float32, this project's 2-core machine,
2026-11-23: `probe run -c all` recorded 2 x 82,420 prompt tokens in 216 s; `probe models eval` generated 3 x 560 rows
of up to 64 tokens (130 prompt tokens each on average) in 986 s. Other models scale linearly by parameter count
(:func:`parameter_count`, read from the safetensors headers without loading anything). These are CPU figures: on a
GPU a stage says its estimate after its first step instead.

Example:
    >>> round(prompt_seconds(10_000, models=2, parameters=REFERENCE_PARAMETERS), 1)
    26.0
"""

from __future__ import annotations

import json
import math
from pathlib import Path

REFERENCE_PARAMETERS = 134.5e6
# Below this the pace is not the model's size but each layer's fixed cost (the 32-layer tiny pair records 160 prompts in
# about a minute, not the second its size would give): no size-scaled estimate is made for such a model.
SMALLEST_SCALED = REFERENCE_PARAMETERS / 10
PROMPT_SECONDS = 1.3e-3  # per prompt token and model
DECODE_SECONDS = 6.5e-3  # per generated token (up to the limit) and model
# One teacher-forced outcome pass (access.forced_passes), in seconds per token it runs as outcome_seconds counts them
# (each row's prompt once with its two responses, each DPO pair's prompt once with its two replies, a response counted
# at the token limit), on the default pair (SmolLM2-135M, 134.5 M parameters), float32, one thread, this project's
# 2-core CPU machine. benchmarks/bench_interventions.py --outcome-passes (2026-11-27, the default run's 36 held-out
# rows, 16 pairs, 24 passes) measured the shared engine at 0.372 of the engine before per pass (89.7 s against 240.9 s,
# one process, load average 8-12); applied to the 2.5 ms of CPU per whole-sequence token the engine before was
# measured at, that is 1.4 ms per token counted here (the loaded run's own wall clock gave 4.3 ms).
OUTCOME_TOKEN_SECONDS = 1.4e-3


def parameter_count(model_dir: str | Path) -> float:
    """Parameters of a model directory, from its safetensors headers (else from config.json, roughly)."""
    total = 0
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        try:
            with path.open("rb") as handle:
                header = json.loads(handle.read(int.from_bytes(handle.read(8), "little")))
        except (OSError, ValueError):
            continue
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    if total:
        return float(total)
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
        d, n, vocab = int(config["hidden_size"]), int(config["num_hidden_layers"]), int(config["vocab_size"])
        return float(12 * n * d * d + vocab * d)
    except (OSError, ValueError, KeyError, TypeError):
        return REFERENCE_PARAMETERS


def prompt_seconds(tokens: float, *, models: float, parameters: float) -> float:
    """Seconds for ``models`` forward passes over ``tokens`` prompt tokens of a model of ``parameters``, on CPU."""
    return tokens * models * PROMPT_SECONDS * parameters / REFERENCE_PARAMETERS
