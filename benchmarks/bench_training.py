"""Benchmark: build the embedded default pair from nothing and time it (target: <= 300 s on 2 cores).

Prints wall-clock and CPU time per stage (synthesis, SFT with tokenizer and tiny base,
DPO), the total, and a one-line verdict. ``--eval N`` also judges both models on N test
rows (spread over tasks) and prints the per-capability compliance table, with the issue's
targets (SFT >= 80% overall and >= 60% per capability; DPO differs from SFT somewhere).

    .venv/bin/python benchmarks/bench_training.py              # build only, into a fresh temp $PROBE_HOME
    .venv/bin/python benchmarks/bench_training.py --eval 560   # + the full test split judged
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

TARGET_S = 300.0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=None, help="build here (default: a fresh temp dir, deleted after)")
    parser.add_argument("--eval", type=int, default=0, metavar="N", help="also judge both models on N test rows")
    args = parser.parse_args()
    import torch

    from training.default_pair import DEFAULT_RECIPE, build_default_pair

    with tempfile.TemporaryDirectory(prefix="bench-training-") as tmp:
        work = (args.home or Path(tmp)) / "default_pair"
        if work.exists():
            sys.exit(f"{work} exists; pass an empty --home")
        stages: dict[str, tuple[float, float]] = {}
        marks = {"wall": time.perf_counter(), "cpu": cpu_seconds()}

        def report(stage: str, done: int, total: int) -> None:
            if done == total:
                stages[stage] = (time.perf_counter() - marks["wall"], cpu_seconds() - marks["cpu"])

        wall0, cpu0 = time.perf_counter(), cpu_seconds()
        seconds = build_default_pair(work, DEFAULT_RECIPE, report)
        wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
        print(f"torch threads: {torch.get_num_threads()}, cores: {os.cpu_count()}, load avg: {os.getloadavg()[0]:.1f}")
        for stage, value in seconds.items():
            print(f"  {stage:<11} {value:7.1f} s wall")
        print(f"build total: {wall:.1f} s wall, {cpu:.1f} s CPU (target <= {TARGET_S:.0f} s wall on 2 quiet cores)")
        print(f"VERDICT: {'PASS' if wall <= TARGET_S else 'FAIL'} build {wall:.0f} s vs target {TARGET_S:.0f} s")
        if args.eval:
            evaluate(work, args.eval)


def evaluate(work: Path, n: int) -> None:
    from probe_cli.commands.models import print_table
    from training.evaluate import evaluate_pair

    start = time.perf_counter()
    result = evaluate_pair(work / "sft", work / "dpo", work / "data" / "test.jsonl", max_rows=n)
    print(f"evaluation of {sum(result.task_counts.values())} rows x 2 models: {time.perf_counter() - start:.1f} s")
    print_table(result)
    rows = {r["capability"]: r for r in result.table}
    sft_ok = rows["overall"]["sft_rate"] >= 0.8 and all(r["sft_rate"] >= 0.6 for k, r in rows.items() if k != "overall")
    differs = any(r["mcnemar_p"] < 0.05 for k, r in rows.items() if k != "overall")
    print(f"VERDICT: SFT targets {'PASS' if sft_ok else 'FAIL'}; DPO differs significantly somewhere: {'yes' if differs else 'no'}")


if __name__ == "__main__":
    main()
