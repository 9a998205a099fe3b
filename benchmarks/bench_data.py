"""Offline synthesis and rule-judge figures.

Prints (never asserts):
* wall time of ``synthesize`` at --roles 40 (default) and 200 (target: 200 roles "in seconds", < 10 s);
* rows written per second;
* rule-judge throughput on the synthesized test split (target: >= 10,000 verdicts/s, so judging
  never matters next to generation).

Usage: .venv/bin/python benchmarks/bench_data.py [--roles 40 200]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from core.rows import read_test_rows
from data_synthesis.offline import synthesize
from judging.rules import RuleJudge

TARGET_SYNTH_S = 10.0
TARGET_VERDICTS_PER_S = 10_000


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--roles", type=int, nargs="+", default=[40, 200])
    roles = parser.parse_args().roles
    verdict = True
    with tempfile.TemporaryDirectory() as tmp:
        for n in roles:
            out = Path(tmp) / f"r{n}"
            start = time.perf_counter()
            summary = synthesize(out, n_roles=n, seed=0)
            took = time.perf_counter() - start
            rows = sum(summary.files.values())
            print(
                f"synthesize --roles {n}: {took:.2f} s, {rows} rows ({rows / took:,.0f} rows/s), "
                f"sft {summary.files['sft.jsonl']}, dpo {summary.files['dpo.jsonl']}, "
                f"test {summary.files['test.jsonl']}"
            )
            verdict &= took < TARGET_SYNTH_S
        test = read_test_rows(Path(tmp) / f"r{roles[-1]}" / "test.jsonl")
        judge = RuleJudge()
        start = time.perf_counter()
        judge.judge(test, [r.reference for r in test])
        rate = len(test) / (time.perf_counter() - start)
        print(f"rule judge: {rate:,.0f} verdicts/s over {len(test)} rows")
        verdict &= rate >= TARGET_VERDICTS_PER_S
    print(
        f"verdict: {'PASS' if verdict else 'MISS'} (synthesis < {TARGET_SYNTH_S:.0f} s per size, "
        f"judge >= {TARGET_VERDICTS_PER_S:,}/s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
