"""Where one model's greedy evaluation goes: the parts of shared decoding, timed, over the evaluation's batches.

``probe models eval`` (and ``probe replicate``'s evaluate stage) decodes each model on the held-out split in the batches
of :func:`training.evaluate.batch_plan`. This runs one model the same way (every batch in one
:func:`access.shared_generation.generate_unedited` call, :data:`core.decoding.EVAL_GENERATION`; ``--apart``: a call per
batch, as before joint steps) and prints how its batches step (in how many groups, their caches against the cache
budget), then, after each call, the seconds spent in the prompt passes, the decode steps, the logits and argmax of each
step (``choose``), the move from one step to the next (``advance``: new groups, finished rows leaving), and the cache
copies among them (``copies``, and their number), with the prompt tokens of the passes (every stem once, padding not
counted); and within the passes and steps, the attention calls (``attention``: :func:`access.attention.grouped_sdpa` on
the prompt passes' and on the steps' rows, a packed pass's queries set in their padded places and taken back included:
the part of their time a weight-FLOP floor counts as free). Nothing is asserted; ``--responses FILE`` writes the
responses in row order (JSON), to compare two versions of the engine.

    OMP_NUM_THREADS=2 python benchmarks/bench_eval_decode.py                      # the default pair's SFT model
    OMP_NUM_THREADS=2 python benchmarks/bench_eval_decode.py --model dpo --batches 1 --responses out.json
    OMP_NUM_THREADS=2 python benchmarks/bench_eval_decode.py --model-dir DIR --test FILE
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

PARTS = ("prompt", "decode", "choose", "advance", "copies", "attention")


def _timed(owner: Any, name: str, part: Callable[[tuple[Any, ...], Any], str], seconds: dict[str, float]) -> None:
    """Wrap ``owner.name`` to add its seconds to ``seconds[part(args, result)]``."""
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        result = original(*args, **kwargs)
        seconds[part(args, result)] += time.perf_counter() - start
        return result

    setattr(owner, name, wrapper)


def _counted(counter: Counter[str], part: str) -> str:
    counter[part] += 1
    return part


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", default="smollm2", help="the default pair whose model runs (built if absent)")
    parser.add_argument("--model", choices=("sft", "dpo"), default="sft", help="which of the pair's models")
    parser.add_argument("--model-dir", type=Path, help="any local causal LM instead of the pair's")
    parser.add_argument("--test", type=Path, help="a test file (default: the held-out split)")
    parser.add_argument("--batches", type=int, help="only the first N batches")
    parser.add_argument("--batch-size", type=int, help="prompts per batch (default: the evaluation's)")
    parser.add_argument("--responses", type=Path, help="write the responses here, in row order")
    parser.add_argument(
        "--apart", action="store_true", help="decode each batch on its own (before joint steps), not all together"
    )
    args = parser.parse_args()

    from transformers import AttentionInterface

    from access import attention, decode_batch, decode_step
    from access.generation import Generator
    from access.shared_generation import SharedDecoder, generate_unedited
    from core.decoding import EVAL_GENERATION
    from core.models import load_causal_lm
    from core.rows import read_test_rows
    from data_synthesis.heldout.files import heldout_test_file
    from training.evaluate import batch_plan

    seconds: dict[str, float] = defaultdict(float)
    copies = Counter[str]()
    _timed(
        decode_step.BatchDecoder,
        "_step",
        lambda a, _: "prompt" if a[1].group_input.shape[1] > 1 else "decode",
        seconds,
    )
    _timed(decode_step, "joint_step", lambda _a, _r: "decode", seconds)
    _timed(decode_step.BatchDecoder, "_last_logits", lambda _a, _r: "choose", seconds)
    _timed(decode_batch.DecodeBatch, "advance", lambda _a, _r: "advance", seconds)
    _timed(decode_batch, "select_rows", lambda _a, _r: _counted(copies, "copies"), seconds)
    _timed(attention, "grouped_sdpa", lambda _a, _r: "attention", seconds)
    AttentionInterface.register(attention.GROUPED_SDPA, attention.grouped_sdpa)  # the timed one

    config = replace(EVAL_GENERATION, batch_size=args.batch_size or EVAL_GENERATION.batch_size)
    rows = read_test_rows(args.test or heldout_test_file())
    model_dir = args.model_dir
    if model_dir is None:
        from training.default_pair import ensure_default_pair

        pair = ensure_default_pair(pair=args.pair, progress=False)
        model_dir = pair.sft_dir if args.model == "sft" else pair.dpo_dir
    model, tokenizer = load_causal_lm(model_dir, "--model-dir", eval_mode=True)
    questions = [row.question for row in rows]
    lengths = [len(p) for p in Generator(model, tokenizer, questions, config).prompts]
    responses: dict[int, str] = {}
    batches = batch_plan(lengths, config.batch_size)[: args.batches]
    calls, real = len(batches) if args.apart else 1, 0
    start = time.perf_counter()
    for number, group in enumerate([[b] for b in batches] if args.apart else [batches], 1):
        rows = [i for batch in group for i in batch]
        generator = Generator(model, tokenizer, [questions[i] for i in rows], config)
        starts = list(itertools.accumulate(map(len, group), initial=0))
        parts = [range(first, end) for first, end in itertools.pairwise(starts)]
        decoder = SharedDecoder(generator, parts=parts)
        real += decoder.prompt_tokens()
        caches = sum(decoder.cache_bytes(batch, [None]) for batch in decoder.batches) / 2**30
        print(f"{decoder.describe([None])}; caches {caches:.2f} GiB, budget {decoder.max_cache_bytes / 2**30:g} GiB")
        responses.update(zip(rows, generate_unedited(generator, parts).texts, strict=True))
        timed = ", ".join(f"{part} {seconds[part]:.1f} s" for part in PARTS)
        print(f"after {number} of {calls} ({len(rows)} rows): {time.perf_counter() - start:.1f} s; {timed}")
    print(f"{copies['copies']} cache copies; {real} prompt tokens (every stem once, padding not counted)")
    if args.responses:
        args.responses.write_text(json.dumps([responses[i] for i in sorted(responses)]), encoding="utf-8")


if __name__ == "__main__":
    main()
