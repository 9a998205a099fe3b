"""Issue 51: every stage of ``probe replicate`` against its weight-FLOP floor, and the issue's budgets, PASS/FAIL.

With ``--run`` it runs ``probe replicate --out RUN_DIR`` (the default pair and today's defaults; any option this
script does not know goes to ``probe replicate``, e.g. ``--pair planted``), then reads the run: each stage's time as
the run recorded it in ``replicate.json`` (within the intervene stage, greedy generation and the teacher-forced
outcome passes apart: :mod:`core.clock`), beside its floor (:mod:`study.floors`: the stage's weight FLOPs, counted
from its plan and its records, over this machine's rate for the model's own matrix products, measured here once, in
float32 at the run's thread count) and their ratio, PASS/FAIL against 1.5x. Then the budgets: the replicate without
its localize stage against 20 minutes, the intervene stage against 8 (where it ran the default ``probe intervene``),
the localize stage against its own 10 (issue 50). The machine's load before and after: a busy machine moves the times,
not the floors. Without ``--run`` it reads a finished replicate run. Nothing is asserted.

    .venv/bin/python benchmarks/bench_stages.py runs/stages --run      # probe replicate on the default pair first
    .venv/bin/python benchmarks/bench_stages.py runs/replicate-smollm2 # a finished run: the table only
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.flops import RATE_SECONDS  # noqa: E402 - the repository is on the path only now


def report(run_dir: Path, rate_seconds: float = RATE_SECONDS) -> int:
    """The table of a finished replicate run (module doc)."""
    from core.flops import RATE_ROWS, Weights, matmul_rate
    from study.floors import budgets, machine, read_run, stage_floors, table

    before = machine()
    record, options = read_run(run_dir)
    weights = Weights.of(options.models.dpo)
    floors = stage_floors(run_dir)
    rate = matmul_rate(weights, threads=record.threads, seconds=rate_seconds)
    print(f"run: {run_dir} ({record.command})")
    print(
        f"model: {options.models.dpo}: {weights.layers} blocks of {weights.block / 1e6:.2f} M parameters in matrix "
        f"products, LM head {weights.head / 1e6:.1f} M"
    )
    print(
        f"this machine's matrix products (one block's on {RATE_ROWS} rows, float32, sustained over {rate_seconds:g} s, "
        f"torch threads {record.threads or 'as here'}): {rate / 1e9:.1f} GFLOP/s"
    )
    for line in [*table(floors, weights, rate), *budgets(record, options)]:
        print(line)
    print(f"machine: before: {before}; after: {machine()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, nargs="?", help="a probe replicate run (with --run: where it goes)")
    parser.add_argument("--run", action="store_true", help="run probe replicate --out RUN_DIR first")
    parser.add_argument(
        "--rate-seconds",
        type=float,
        default=RATE_SECONDS,
        help="how long the machine's matrix-product rate is measured (default: %(default)g)",
    )
    args, replicate = parser.parse_known_args(argv)
    if args.run_dir is None:
        print("nothing to time: give RUN_DIR (a finished probe replicate run), or RUN_DIR --run to run one first")
        return 0
    if replicate and not args.run:
        parser.error(f"unknown options {' '.join(replicate)} (they go to probe replicate, with --run)")
    if args.run:
        command = [sys.executable, "-m", "probe_cli", "replicate", "--out", str(args.run_dir), *replicate]
        code = subprocess.run(command, check=False).returncode
        if code:
            print(f"probe replicate failed (exit status {code}); no table")
            return code
    return report(args.run_dir, args.rate_seconds)


if __name__ == "__main__":
    sys.exit(main())
