"""The measured pace of the toolkit's forward passes, from which every stage estimates its time before it runs.

Measured on the default pair (SmolLM2-135M, 134.5 M parameters), CPU float32, torch's 2 threads, this project's
2-core machine, 2026-11-29 (benchmarks/bench_stages.py, the tree of dc1dde8, nothing else running): the replicate's
record stage took 626.5 s where these paces as first measured (2026-11-23, 1.3 ms and 6.5 ms) said 303.7 s, and its
evaluate stage 733.3 s where they said 354.3 s. Both stages took 2.10x their estimate past the 10 s of launching, the
prompt-only stage and the decoding one alike, so the machine, not one pace, had changed: both paces are the first
ones times 2.10. These paces hold on a machine whose matrix products run at
:data:`REFERENCE_RATE`; another machine's estimates are scaled by :func:`machine_pace`, that rate over the one measured
here once per process (one SmolLM2-135M block's products, as :mod:`core.flops` measures a stage's floor, at the
reference's 2 threads): on a 2-core AMD EPYC Zen 4 that measured 195.8 GFLOP/s (2026-11-30), SFT's evaluation
took 92.7 s where the reference machine took 173.8 s, 0.53x, and the pace said 0.53x. ``PROBE_MACHINE_PACE=x``
sets the pace instead (1: this machine is the reference). Other models scale linearly by parameter count
(:func:`parameter_count`, read from the safetensors headers without loading anything). These are CPU figures: on a
GPU a stage says its estimate after its first step instead.

Example:
    >>> round(prompt_seconds(10_000, models=2, parameters=REFERENCE_PARAMETERS) / machine_pace(), 1)   # reference
    54.6
    >>> round(gradient_seconds(10_000, parameters=REFERENCE_PARAMETERS) / machine_pace(), 1)   # both models, a backward
    90.1
    >>> round(batched_seconds([[0] * 64, [0] * 34], 64, parameters=REFERENCE_PARAMETERS) / machine_pace(), 1)
    34.1
    >>> sized("cpu", REFERENCE_PARAMETERS), sized("cuda:0", REFERENCE_PARAMETERS), sized("cpu", 1e6)
    (True, False, False)
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

from core.errors import ProbeError
from core.flops import SMOLLM2_135M, matmul_rate

REFERENCE_PARAMETERS = 134.5e6
# Below this the pace is not the model's size but each layer's fixed cost (the 32-layer tiny pair records 160 prompts in
# about a minute, not the second its size would give): no size-scaled estimate is made for such a model.
SMALLEST_SCALED = REFERENCE_PARAMETERS / 10
MACHINE_SINCE_FIRST = 2.10  # the reference machine's pace against the one the first paces were measured on (module doc)
# The reference machine's rate for one SmolLM2-135M block's matrix products (core.flops.matmul_rate: 1024 rows, float32,
# 2 threads, 3 s sustained), measured with the replicate run that confirmed the paces (2026-11-30, 103.0 GFLOP/s)
REFERENCE_RATE = 103.0e9
PACE_SECONDS = 0.5  # how long machine_pace measures this machine's rate, after a warm-up pass
PACE_ENV = "PROBE_MACHINE_PACE"
PROMPT_SECONDS = 1.3e-3 * MACHINE_SINCE_FIRST  # per prompt token and model
DECODE_SECONDS = 6.5e-3 * MACHINE_SINCE_FIRST  # per generated token (up to the limit) and model
# A greedy evaluation's decoding on the shared engine (access.shared_generation: finished rows leave, caches grow in
# place, products on packed weights), per decode step of a batch and per row of it, counted up to the token limit:
# SFT's evaluation of the default pair's 162 held-out rows in batches of 64, 64 and 34 took 0.28, 0.35 and 0.26 s per
# step on the reference machine (benchmarks/bench_eval_decode.py, 2026-11-30, 2 threads, its measured pace 0.70 and
# 0.53 on two reads: the same within 5%). A step reads every weight whatever its rows: the fixed part.
DECODE_STEP_SECONDS = 0.10
DECODE_ROW_SECONDS = 3.4e-3
# One teacher-forced outcome pass (access.forced_passes), in seconds per token it runs as outcome_seconds counts them
# (each row's prompt once with its two responses, each DPO pair's prompt once with its two replies, a response counted
# at the token limit), on the default pair (SmolLM2-135M, 134.5 M parameters), float32, one thread, this project's
# 2-core CPU machine. benchmarks/bench_interventions.py --outcome-passes (2026-11-27, the default run's 36 held-out
# rows, 16 pairs, 24 passes) measured the shared engine at 0.372 of the engine before per pass (89.7 s against 240.9 s,
# one process, load average 8-12); applied to the 2.5 ms of CPU per whole-sequence token the engine before was
# measured at, that is 1.4 ms per token counted here (the loaded run's own wall clock gave 4.3 ms).
OUTCOME_TOKEN_SECONDS = 1.4e-3
# One attribution batch (probes.attribution.attribute_batch: the SFT model's forward, the DPO model's forward with
# autograd from the input embeddings, and its backward to the 90 recorded sites) over one plain forward of one model (no
# hooks, inference mode) over the same padded tokens: 3.25-3.31 on the default pair (SmolLM2-135M, float32, one thread,
# this project's 2-core CPU machine, 2026-11-27, load average 2.3-2.8), the default run's multi_turn reference_logprob
# batches at the CPU budget (366 and 507 padded tokens), 3 and 5 interleaved repeats, best of each. A ratio, so the
# machine's load cancels; the forward's pace is PROMPT_SECONDS.
GRADIENT_PASS_RATIO = 3.3


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


@functools.cache
def machine_pace() -> float:
    """This machine's seconds for the reference machine's one (module doc): ``$PROBE_MACHINE_PACE`` if set, else
    :data:`REFERENCE_RATE` over this machine's rate, measured once per process at the reference's 2 threads (one
    where the machine has one core)."""
    said = os.environ.get(PACE_ENV)
    if said is not None:
        try:
            pace = float(said)
        except ValueError:
            pace = math.nan
        if not (math.isfinite(pace) and pace > 0):
            raise ProbeError(f"{PACE_ENV}: expected a positive number (1: this machine is the reference), got {said!r}")
        return pace
    threads = min(2, os.cpu_count() or 1)
    return REFERENCE_RATE / matmul_rate(SMOLLM2_135M, threads=threads, seconds=PACE_SECONDS)


def scale(parameters: float) -> float:
    """How many times the reference model's seconds on the reference machine a model of ``parameters`` takes here."""
    return parameters / REFERENCE_PARAMETERS * machine_pace()


def sized(device: str, parameters: float) -> bool:
    """Whether a stage estimates its time up front from this pace: on CPU, for a model of at least
    :data:`SMALLEST_SCALED` parameters (elsewhere it says its estimate after its first step)."""
    return device.startswith("cpu") and parameters >= SMALLEST_SCALED


def prompt_seconds(tokens: float, *, models: float, parameters: float) -> float:
    """Seconds for ``models`` forward passes over ``tokens`` prompt tokens of a model of ``parameters``, on CPU."""
    return tokens * models * PROMPT_SECONDS * scale(parameters)


def gradient_seconds(tokens: float, *, parameters: float) -> float:
    """Seconds for attribution batches over ``tokens`` padded tokens (both models' forwards and the DPO model's
    backward, :data:`GRADIENT_PASS_RATIO`), on CPU."""
    return prompt_seconds(tokens, models=GRADIENT_PASS_RATIO, parameters=parameters)


def batched_seconds(batches: Sequence[Sequence[int]], new_tokens: int, *, parameters: float) -> float:
    """Seconds for one model to read ``batches`` of prompts (each its prompts' lengths in tokens) and decode each batch
    up to ``new_tokens`` on the shared engine (every step of every batch counted), on CPU."""
    prompts = sum(map(sum, batches))
    steps = sum(new_tokens * (DECODE_STEP_SECONDS + len(batch) * DECODE_ROW_SECONDS) for batch in batches)
    return (prompts * PROMPT_SECONDS + steps) * scale(parameters)


def generation_seconds(prompt_tokens: float, new_tokens: float, *, parameters: float) -> float:
    """Seconds for one model to read ``prompt_tokens`` and generate up to ``new_tokens`` (counted at the limit), on
    CPU."""
    return (prompt_tokens * PROMPT_SECONDS + new_tokens * DECODE_SECONDS) * scale(parameters)
