"""``probe dictionary``'s cost against issue 52's budget: 2 M tokens trained and evaluated in 45 minutes on 2 cores.

Three parts, each printing its figure and, where there is a target, PASS or FAIL:

1. **harvest pace** (``--part harvest``): both models of the pair up to the dictionary's layer (no LM head) on
   ``--probe-tokens`` tokens of the default text mix, as the harvest runs them; pair-tokens per second, and the
   minutes the default 2 M tokens would take at that pace;
2. **training pace** (``--part train``): crosscoder and diff-SAE steps of the default sizes on synthetic activations
   of the pair's width; tokens per second and the minutes for one epoch over 1.8 M training tokens (2 M less the
   held-out tenth), the null dictionary included;
3. **the run** (``--part run``): the default ``probe dictionary`` end to end into ``--out`` (resumable), timed;
   PASS when it finishes within :data:`BUDGET_MIN` minutes with at least :data:`TOKENS` tokens.

Parts 1 and 2 together give the arithmetic docs/dictionary.md states; part 3 is the measurement. The machine is
shared: run it with ``nice`` and note ``uptime``'s load beside every figure.

Example:
    python benchmarks/bench_dictionary.py --part harvest,train             # the pace, about 3 minutes
    nice -n 10 python benchmarks/bench_dictionary.py --part run --out runs/dict-bench   # the budget itself
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

BUDGET_MIN = 45.0
TOKENS = 2_000_000


def harvest_pace(probe_tokens: int, pair: str) -> float:
    """Pair-tokens per second of the harvest on the default pair's text, at the default site."""
    import tempfile

    from dictionary.config import DictionaryConfig
    from dictionary.run import _harvest, prepare
    from training.default_pair import ensure_default_pair

    built = ensure_default_pair(pair=pair, progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        config = DictionaryConfig(
            sft_dir=built.sft_dir, dpo_dir=built.dpo_dir, chat_data=built.data_dir, tokens=probe_tokens, out_dir=tmp
        )
        prepared = prepare(config)
        started = time.perf_counter()
        _harvest(prepared, progress=False)
        seconds = time.perf_counter() - started
    rate = prepared.mix.tokens() / seconds
    tokens = prepared.mix.tokens()
    print(f"harvest: {tokens:,} tokens at layer {prepared.layer} in {seconds:.1f} s: {rate:,.0f} pair-tok/s")
    print(f"harvest: {TOKENS:,} tokens would take {TOKENS / rate / 60:.1f} min")
    return rate


def train_pace(width: int = 576, steps: int = 5) -> dict[str, float]:
    """Tokens per second of a training step of each default dictionary on random activations."""
    import torch

    from dictionary.coders import Coder, training_loss
    from dictionary.config import DEFAULT_EXPANSION, DEFAULT_K

    rates = {}
    for kind, inputs in (("crosscoder", 2), ("diff-sae", 1)):
        coder = Coder(inputs, width, width * DEFAULT_EXPANSION[kind], DEFAULT_K[kind])
        optimizer = torch.optim.Adam(coder.parameters(), lr=1e-4)
        x = torch.randn(2048, inputs, width)
        dead = torch.zeros(coder.latents, dtype=torch.bool)
        times = []
        for step in range(steps + 1):
            started = time.perf_counter()
            loss, _ = training_loss(coder, x, dead, width // 2)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step:
                times.append(time.perf_counter() - started)
        rates[kind] = 2048 / sorted(times)[len(times) // 2]
        epochs = 2 if kind == "crosscoder" else 1  # the crosscoder's null trains as long again
        minutes = epochs * 0.9 * TOKENS / rates[kind] / 60
        print(
            f"train {kind}: {rates[kind]:,.0f} tok/s; 0.9 x {TOKENS:,} tokens: {minutes:.1f} min"
            + (" (with its null)" if epochs == 2 else "")
        )
    return rates


def run(out: Path, pair: str) -> None:
    from dictionary.config import DictionaryConfig
    from dictionary.run import dictionary_run
    from training.default_pair import ensure_default_pair

    built = ensure_default_pair(pair=pair, progress=False)
    started = time.perf_counter()
    result = dictionary_run(
        DictionaryConfig(sft_dir=built.sft_dir, dpo_dir=built.dpo_dir, chat_data=built.data_dir, out_dir=out)
    )
    minutes = (time.perf_counter() - started) / 60
    tokens = result.summary["text"]["tokens"]
    verdict = "PASS" if minutes <= BUDGET_MIN and tokens >= TOKENS else "FAIL"
    print(f"run: {tokens:,} tokens in {minutes:.1f} min against {BUDGET_MIN:.0f} min: {verdict}")
    print(f"run: held-out FVE {result.summary['held_out']['fve']}, load {os.getloadavg()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", default="harvest,train", help="harvest, train, run (comma-separated)")
    parser.add_argument("--probe-tokens", type=int, default=40_000)
    parser.add_argument("--pair", default="smollm2")
    parser.add_argument("--out", type=Path, default=Path("runs/dictionary-bench"))
    args = parser.parse_args()
    parts = set(args.part.split(","))
    print(f"load average {os.getloadavg()}, torch threads from OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    if "harvest" in parts:
        harvest_pace(args.probe_tokens, args.pair)
    if "train" in parts:
        train_pace()
    if "run" in parts:
        run(args.out, args.pair)


if __name__ == "__main__":
    main()
