"""Data-parallel ``probe intervene`` (issue 41): N processes against one, same command, figures and PASS/FAIL printed.

One process runs ``probe intervene RUN_DIR ...`` with ``OMP_NUM_THREADS=CORES``; then ``torchrun
--nproc-per-node N`` runs the same command with ``OMP_NUM_THREADS=CORES/N`` per process (the same cores, split), so
the ratio is what dealing the shared engine's batches to processes gains on this machine. Wall seconds of the
whole command (loading, decoding, judging, the report) are printed for each, the speed-up ratio, and whether
``generations.jsonl`` is byte-identical. Target, fixed before measuring: speed-up >= 0.8x on a CPU machine (the
cores are the same; data parallelism should cost little), >= 0.7 x N with N GPUs (``--device cuda``).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_intervene_parallel.py --run-dir /tmp/local38/default_pair

Without ``--run-dir`` (a ``probe run`` directory of the pair to intervene on) it prints SKIP.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_TARGET, GPU_TARGET_PER_PROCESS = 0.8, 0.7


def _command(run_dir: str, out: Path, args: argparse.Namespace) -> list[str]:
    return [
        "intervene",
        run_dir,
        "-c",
        args.capability,
        "--edit",
        "scale,patch",
        "--top-k",
        "32",
        "--placebo",
        str(args.placebo),
        "--limit",
        str(args.limit),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--outcomes",
        "off",
        "--device",
        args.device,
        "--out",
        str(out),
    ]


def _timed(command: list[str], threads: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-2000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", help="a probe run directory (e.g. /tmp/local38/default_pair)")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--capability", default="multi_turn")
    parser.add_argument("--limit", type=int, default=32)
    parser.add_argument("--placebo", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    args, _ = parser.parse_known_args()
    if not args.run_dir:
        print("SKIP: data-parallel probe intervene needs --run-dir (a probe run directory)")
        return 0
    per_process = max(1, args.cores // args.nproc)
    with tempfile.TemporaryDirectory() as tmp:
        one, many = Path(tmp) / "one", Path(tmp) / "many"
        single = _timed([sys.executable, "-m", "probe_cli", *_command(args.run_dir, one, args)], args.cores)
        launcher = [sys.executable, "-m", "probes.distributed", "--standalone", f"--nproc-per-node={args.nproc}"]
        parallel = _timed([*launcher, "-m", "probe_cli", *_command(args.run_dir, many, args)], per_process)
        same = (one / "generations.jsonl").read_bytes() == (many / "generations.jsonl").read_bytes()
    ratio = single / parallel
    target = CPU_TARGET if args.device == "cpu" else GPU_TARGET_PER_PROCESS * args.nproc
    print(f"probe intervene {args.run_dir}: {args.limit} rows, --placebo {args.placebo}, scale+patch, {args.device}")
    print(f"1 process, OMP_NUM_THREADS={args.cores}: {single:.1f} s")
    print(f"{args.nproc} processes, OMP_NUM_THREADS={per_process} each: {parallel:.1f} s")
    print(f"speed-up {ratio:.2f}x  [target >= {target:.1f}x: {'PASS' if ratio >= target else 'FAIL'}]")
    print(f"generations.jsonl byte-identical: {'yes' if same else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
